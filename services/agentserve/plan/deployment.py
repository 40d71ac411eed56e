"""A deployment the planner can choose, what it costs, and one simulated trial of it.

A `Point` is a policy set (a `bench dualpath` policy name, resolved by `sim.policies.resolve` into
the scheduler's and the prefill engine's own policy objects), the storage-NIC bandwidth of each node
and the prefill and decode engine counts (one GPU each; engines fill nodes of `gpus_per_node`, and a
node's storage NIC is shared by its engines as `SimConfig` lays it out), under the store lifecycle.
A colocated point (`plan/colocated.py`) is instead a KV lifecycle policy and a count of engines
that prefill and decode both. Its cost per hour is its GPUs at `gpu_hour` plus each node's storage
NIC at `snic_100g_hour` per 100 Gbps.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace
from typing import Any

from agentserve.bench.common.stats import percentile
from agentserve.bench.papers.replay.records import TurnRecord
from agentserve.bench.papers.replay.slo import SLO
from agentserve.plan.colocated import COLOCATED, STORE, simulate_colocated
from agentserve.plan.workload import PlanWorkload
from agentserve.sim.cluster import SimCluster
from agentserve.sim.config import SimConfig
from agentserve.sim.policies import resolve
from agentserve.sim.run import ClusterFactory, RunResult, figures, simulate

# A rented H800/H100-class GPU-hour, and a node's storage NIC per 100 Gbps-hour (a 400 Gbps NIC and
# its switch port, about $4,000, over three years): stated defaults, `--gpu-hour-cost` /
# `--snic-cost` to use real prices.
DEFAULT_GPU_HOUR_COST = 2.0
DEFAULT_SNIC_100G_HOUR_COST = 0.04


@dataclass(frozen=True)
class Prices:
    gpu_hour: float = DEFAULT_GPU_HOUR_COST
    snic_100g_hour: float = DEFAULT_SNIC_100G_HOUR_COST

    def __post_init__(self) -> None:
        if not (self.gpu_hour > 0 and self.snic_100g_hour >= 0):
            raise ValueError(f"prices must be gpu_hour > 0, snic >= 0, got {self.gpu_hour}, {self.snic_100g_hour}")


@dataclass(frozen=True, order=True)
class Point:
    policy: str  # a policy set, or COLOCATED
    snic_gbps: float  # one node's storage NICs together
    prefill: int
    decode: int
    lifecycle: str = STORE  # the KV lifecycle policy: STORE on prefill/decode points
    colocated: int = 0  # engines that prefill and decode both (a colocated point has no others)

    @property
    def gpus(self) -> int:
        return self.prefill + self.decode + self.colocated

    def nodes(self, gpus_per_node: int) -> int:
        return sum(math.ceil(n / gpus_per_node) for n in (self.prefill, self.decode, self.colocated))

    def cost_per_hour(self, prices: Prices, gpus_per_node: int) -> float:
        return self.gpus * prices.gpu_hour + self.nodes(gpus_per_node) * self.snic_gbps / 100 * prices.snic_100g_hour

    def config(self, base: SimConfig) -> SimConfig:
        return replace(base, snic_gbps=self.snic_gbps, prefill_engines=self.prefill, decode_engines=self.decode)

    def configuration(self) -> str:
        """What the point is apart from its engine counts (a search family)."""
        return f"{COLOCATED} {self.lifecycle}" if self.colocated else self.policy

    def label(self) -> str:
        engines = f"{self.colocated}E" if self.colocated else f"{self.prefill}P+{self.decode}D"
        return f"{self.configuration()} {engines} snic {self.snic_gbps:g}G"

    def to_dict(self) -> dict[str, Any]:
        return {
            "policy": self.policy,
            "lifecycle": self.lifecycle,
            "snic_gbps_per_node": self.snic_gbps,
            "prefill_engines": self.prefill,
            "decode_engines": self.decode,
            "colocated_engines": self.colocated,
            "gpus": self.gpus,
        }


@dataclass
class Trial:
    """One simulated run of a point on the workload drawn with `seed`."""

    point: Point
    seed: int
    attainment: float  # share of turns within every bound that applies to them
    meets_slo: bool  # every term at its own percentile (`SLO.check`)
    ratios: dict[str, float]  # each term's percentile value over its bound (above 1: it fails)
    binds: str  # the term nearest or furthest past its bound
    figures: dict[str, Any]
    wall_s: float
    cost_per_hour: float
    verdict: str = ""  # why chosen or rejected, set by the search
    extra: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return {
            **self.point.to_dict(),
            "seed": self.seed,
            "cost_per_hour": round(self.cost_per_hour, 4),
            "attainment": round(self.attainment, 4),
            "meets_slo": self.meets_slo,
            "value_over_bound": rounded(self.ratios),
            "binds": self.binds,
            "verdict": self.verdict,
            "wall_s": round(self.wall_s, 2),
        }


@dataclass(frozen=True)
class Evaluator:
    """Simulates points on one workload against one SLO; remembers every trial by (point, seed)."""

    workload: PlanWorkload
    slo: SLO
    base: SimConfig
    prices: Prices
    turn_order: str
    draw: Any  # seed -> PlanWorkload: the same workload drawn again (seed 0 is `workload`)
    cluster_factory: ClusterFactory = SimCluster
    trials: dict[tuple[Point, int], Trial] = field(default_factory=dict)

    def __call__(self, point: Point, seed: int = 0) -> Trial:
        key = (point, seed)
        if key not in self.trials:
            self.trials[key] = self._run(point, seed)
        return self.trials[key]

    def _run(self, point: Point, seed: int) -> Trial:
        workload = self.workload if seed == 0 else self.draw(seed)
        if point.colocated:
            result = simulate_colocated(
                self.base, point.lifecycle, point.colocated, point.snic_gbps, workload.workload, list(workload.arrivals)
            )
        else:
            result = simulate(
                point.config(self.base),
                resolve(point.policy, self.turn_order),
                workload.workload,
                list(workload.arrivals),
                None,
                seed,
                cluster_factory=self.cluster_factory,
            )
        check = self.slo.check(result.records)
        return Trial(
            point=point,
            seed=seed,
            attainment=self.slo.attained(result.records),
            meets_slo=check.meets,
            ratios={t.term.name: t.ratio for t in check.terms},
            binds=check.binding.term.name,
            figures=served(result, self.slo, workload.duration_s),
            wall_s=result.wall_s,
            cost_per_hour=self.cost(point),
        )

    def cost(self, point: Point) -> float:
        return point.cost_per_hour(self.prices, self.base.gpus_per_node)


def rounded(ratios: dict[str, float]) -> dict[str, float | None]:
    """Ratios for JSON: 4 decimals, None where failed turns reach the percentile (infinite)."""
    return {k: None if math.isinf(v) else round(v, 4) for k, v in ratios.items()}


def _p90_ms(records: list[TurnRecord], first: bool) -> float | None:
    value = percentile([r.ttft_s for r in records if r.first == first and r.ttft_s is not None], 90)
    return None if value is None else round(value * 1000, 1)


def served(result: RunResult, slo: SLO, window_s: float) -> dict[str, Any]:
    """What a deployment did with the offered load: latencies by kind of turn, tokens and goodput
    over the arrival window, and agent-hours (each session from its first turn sent to its last
    turn's end)."""
    records = result.records
    run = figures(result)
    sessions: dict[str, tuple[float, float]] = {}
    for r in records:
        lo, hi = sessions.get(r.session_id, (r.sent_s, r.done_s or r.sent_s))
        sessions[r.session_id] = (min(lo, r.sent_s), max(hi, r.done_s or r.sent_s))
    good = [r for r in records if slo.met_by(r)]
    return {
        "turns": len(records),
        "ttft_first_p90_ms": _p90_ms(records, True),
        "ttft_later_p90_ms": _p90_ms(records, False),
        "tpot_p90_ms": run["tpot_p90_ms"],
        "output_tokens_per_s": sum(r.output_tokens for r in records) / window_s,
        "tokens_per_s": sum(r.prompt_tokens + r.output_tokens for r in records) / window_s,
        "goodput_turns_per_s": len(good) / window_s,
        "goodput_tokens_per_s": sum(r.prompt_tokens + r.output_tokens for r in good) / window_s,
        "agent_hours": sum(hi - lo for lo, hi in sessions.values()) / 3600,
        "run_s": result.duration_s,
        "prefill_gpu_busy": run["prefill_gpu_busy"],
        "decode_gpu_busy": run["decode_gpu_busy"],
        "hit_ratio": run["hit_ratio"],
    }


def economics(trial: Trial) -> dict[str, Any]:
    """The chosen deployment's cost per million tokens (prompt + output offered over the window, and
    output alone),
        per agent-hour (cost per hour over the agents active on average), and goodput per GPU."""
    f, hourly = trial.figures, trial.cost_per_hour
    mean_agents = f["agent_hours"] * 3600 / f["run_s"] if f["run_s"] else 0.0
    gpus = trial.point.gpus
    return {
        "cost_per_hour": round(hourly, 3),
        "cost_per_million_tokens": round(hourly / (f["tokens_per_s"] * 3600 / 1e6), 4) if f["tokens_per_s"] else None,
        "cost_per_million_output_tokens": round(hourly / (f["output_tokens_per_s"] * 3600 / 1e6), 4)
        if f["output_tokens_per_s"]
        else None,
        "cost_per_agent_hour": round(hourly / mean_agents, 4) if mean_agents else None,
        "mean_active_agents": round(mean_agents, 2),
        "goodput_turns_per_s_per_gpu": round(f["goodput_turns_per_s"] / gpus, 5),
        "goodput_tokens_per_s_per_gpu": round(f["goodput_tokens_per_s"] / gpus, 1),
    }
