"""`agentserve bench agentaware`: every KV lifecycle policy on the same multi-agent workload.

Policies run one after another, each on a fresh cluster of its own (same engines, profile, pools,
compute), and on it the workload at each arrival rate. The policy list is the scheduler's
registry of names (`kv_lifecycle.LIFECYCLE_POLICIES`), so a policy added there is benchmarked
without touching the bench.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from agentserve.bench.common.cluster import ClusterSpec
from agentserve.bench.common.policy import unsupported
from agentserve.bench.papers.agentaware import ratios
from agentserve.bench.papers.agentaware.bound import TurnCost
from agentserve.bench.papers.agentaware.runs import PolicyRuns, RunSpec, run_policy
from agentserve.bench.papers.agentaware.stacks import lifecycle_policy
from agentserve.bench.papers.agentaware.workload import AgentAwareSpec, describe, generate, read_tool_sample


def policy_names() -> tuple[str, ...]:
    from agentserve.scheduler.kv_lifecycle import LIFECYCLE_POLICIES

    return tuple(LIFECYCLE_POLICIES)


@dataclass(frozen=True)
class BenchSpec:
    workload: AgentAwareSpec
    cluster: ClusterSpec
    trace: Path
    rates: tuple[float, ...]  # jobs per local second
    time_dilation: float  # local seconds per target second: tool times are multiplied by it
    block_bytes: int  # the target's bytes per KV block
    policies: tuple[str, ...] = ()  # empty: every registered policy
    scheduler_settings: dict[str, Any] = field(default_factory=dict)
    regime: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        known = policy_names()
        unknown = [p for p in self.policies if p not in known]
        if unknown:
            raise ValueError(f"unknown policies {unknown}; choose from {', '.join(known)}")
        if len(self.rates) != 3 or any(r <= 0 for r in self.rates):
            raise ValueError(f"rates must be three positive jobs/s values, got {self.rates}")
        if not self.time_dilation > 0:
            raise ValueError(f"time_dilation must be > 0, got {self.time_dilation}")

    def turn_cost(self) -> TurnCost:
        """A turn's modelled compute on these engines (their cost model and time dilation)."""
        emulation = self.cluster.emulation("prefill")
        return TurnCost(emulation.cost(), emulation.time_dilation)

    @property
    def chosen(self) -> tuple[str, ...]:
        names = self.policies or policy_names()
        return (ratios.BASELINE, *(p for p in names if p != ratios.BASELINE))  # the baseline first


async def run_bench(spec: BenchSpec) -> dict[str, Any]:
    started = time.monotonic()
    load_before = os.getloadavg()
    sample = read_tool_sample(spec.trace)
    workload = generate(spec.workload, sample)
    run = RunSpec(workload, spec.rates, 1 / spec.time_dilation, spec.block_bytes, spec.workload.seed, spec.turn_cost())
    results: dict[str, PolicyRuns] = {}
    for name in spec.chosen:
        policy = lifecycle_policy(name, spec.scheduler_settings)
        problems = unsupported(policy)
        if problems:
            results[name] = PolicyRuns(policy, unavailable=problems)
            continue
        results[name] = await run_policy(policy, spec.cluster, run)
    figures = ratios.must_show({n: r.by_rate for n, r in results.items()})
    return {
        **figures,
        "targets": ratios.verdicts(figures),
        "regime": {
            **spec.regime,
            "time_dilation": spec.time_dilation,
            "rates_jobs_per_s": list(spec.rates),
            "cluster": spec.cluster.to_dict(),
            "kv_block_bytes_target": spec.block_bytes,
            "workload": spec.workload.to_dict(),
            "workload_shape": describe(workload),
            "tool_sample": sample.to_dict(),
        },
        "policies": {n: r.to_json() for n, r in results.items()},
        "wall_s": round(time.monotonic() - started, 1),
        "machine": {
            "cpus": os.cpu_count(),
            "load_avg_start": [round(x, 2) for x in load_before],
            "load_avg_end": [round(x, 2) for x in os.getloadavg()],
        },
    }
