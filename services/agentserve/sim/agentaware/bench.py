"""`sim agentaware`: every policy at every arrival rate on one workload, and the must-show keys.

The keys compare `agentserve` with each baseline at the compare rate (by default the highest,
past the `vllm` baseline's saturation, where TokenCake measures its gains), from runs of the same
jobs with the same arrivals:

- `e2e_latency_reduction` = 1 - mean job latency (agentserve) / mean job latency (baseline);
- `kv_utilization_gain` = KV utilisation (agentserve) / KV utilisation (baseline) - 1, where KV
  utilisation is the share of pool slot-seconds holding blocks a turn in flight references or
  that a later turn hits before they leave the pool (`AwareEngine`);
- `prefetch_hit_ratio`: of the returning turns whose KV had left their engine during the tool
  wait, the share whose context was resident when admitted (brought back in time).

Beside the keys against `lru`, the bound the run allows: the largest latency reduction any policy
could show (1 - the mean of lru's jobs' latency bounds / its mean latency, `bench agentaware`'s
bound), the largest utilisation gain (every slot useful: 1 / lru's utilisation - 1), and 1.0 for
the hit ratio.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

from agentserve.bench.common.workloads.model import Workload
from agentserve.bench.papers.agentaware.ratios import verdicts
from agentserve.bench.papers.agentaware.workload import AgentAwareSpec, ToolSample, describe, generate
from agentserve.sim.agentaware.config import AwareConfig
from agentserve.sim.agentaware.policies import POLICY_NAMES, VLLM, make_aware_policy
from agentserve.sim.agentaware.run import simulate_aware

OURS = "agentserve"
LRU = "lru"


@dataclass(frozen=True)
class AwareBenchSpec:
    config: AwareConfig
    workload: AgentAwareSpec
    rates: tuple[float, ...]
    policies: tuple[str, ...] = POLICY_NAMES
    compare_rate: float | None = None  # None: the highest rate
    seed: int = 0

    def __post_init__(self) -> None:
        if not self.rates or any(r <= 0 for r in self.rates):
            raise ValueError(f"rates must be positive job arrival rates, got {self.rates}")
        for name in self.policies:
            make_aware_policy(name)
        for needed in (VLLM, LRU, OURS):
            if needed not in self.policies:
                raise ValueError(f"policies must include {needed} (the keys compare {OURS} with {VLLM} and {LRU})")
        if self.compare_rate is not None and self.compare_rate not in self.rates:
            raise ValueError(f"compare_rate {self.compare_rate} is not one of the rates {self.rates}")

    @property
    def at_rate(self) -> float:
        return self.compare_rate if self.compare_rate is not None else max(self.rates)


def _reduction(ours: float | None, base: float | None) -> float | None:
    return None if ours is None or not base else round(1 - ours / base, 6)


def _gain(ours: float | None, base: float | None) -> float | None:
    return None if ours is None or not base else round(ours / base - 1, 6)


def keys_against(ours: dict[str, Any], base: dict[str, Any]) -> dict[str, Any]:
    return {
        "e2e_latency_reduction": _reduction(ours["job_latency_mean_s"], base["job_latency_mean_s"]),
        "kv_utilization_gain": _gain(ours["kv"]["kv_utilization"], base["kv"]["kv_utilization"]),
        "prefetch_hit_ratio": ours["prefetch_hit_ratio"],
    }


def bounds_against(base: dict[str, Any]) -> dict[str, Any]:
    util = base["kv"]["kv_utilization"]
    return {
        "e2e_latency_reduction_bound": _reduction(
            base["bound"]["job_latency_bound_mean_s"], base["job_latency_mean_s"]
        ),
        "kv_utilization_gain_bound": round(1 / util - 1, 6) if util else None,
        "prefetch_hit_ratio_bound": 1.0,
    }


def must_show(runs: dict[str, dict[float, dict[str, Any]]], rate: float) -> dict[str, Any]:
    ours, vllm, lru = runs[OURS][rate], runs[VLLM][rate], runs[LRU][rate]
    top, against_lru = keys_against(ours, vllm), keys_against(ours, lru)
    return {
        **top,
        "compared_at_rate_jobs_per_s": rate,
        "vs_vllm_bound": bounds_against(vllm),
        "vs_lru": {**against_lru, **bounds_against(lru)},
        "targets": verdicts(top),
        "targets_vs_lru": verdicts(against_lru),
    }


def run_bench(spec: AwareBenchSpec, sample: ToolSample) -> dict[str, Any]:
    started = time.monotonic()
    workload: Workload = generate(spec.workload, sample)
    runs: dict[str, dict[float, dict[str, Any]]] = {name: {} for name in spec.policies}
    for rate in spec.rates:
        for name in spec.policies:
            runs[name][rate] = simulate_aware(spec.config, make_aware_policy(name), workload, rate, spec.seed)
    return {
        **must_show(runs, spec.at_rate),
        "regime": {
            "cluster": spec.config.to_dict(),
            "workload": {**spec.workload.to_dict(), **describe(workload), "tool_sample": sample.to_dict()},
            "rates_jobs_per_s": list(spec.rates),
            "policies": {name: make_aware_policy(name).to_dict() for name in spec.policies},
            "seed": spec.seed,
        },
        "by_rate": {str(rate): {name: _summary(runs[name][rate]) for name in spec.policies} for rate in spec.rates},
        "runs": {name: {str(rate): run for rate, run in by_rate.items()} for name, by_rate in runs.items()},
        "wall_s": round(time.monotonic() - started, 3),
    }


def _summary(run: dict[str, Any]) -> dict[str, Any]:
    return {
        "job_latency_mean_s": run["job_latency_mean_s"],
        "job_latency_p90_s": run["job_latency_p90_s"],
        "kv_utilization": run["kv"]["kv_utilization"],
        "prefetch_hit_ratio": run["prefetch_hit_ratio"],
        "recomputed_tokens": run["recomputed_tokens"],
        "gpu_busy": run["gpu_busy"],
        "working_set_peak_over_pools": run["working_set_peak_over_pools"],
    }
