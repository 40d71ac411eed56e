"""`agentserve plan`: the cheapest deployment that serves a workload within an SLO, by simulation.

Builds the evaluator (workload, SLO, the profile's cluster and target model, prices), runs the
search (`plan/search.py`), checks the choice at another seed, and reports the deployment, its
economics, the consistency record and every point tried.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from functools import partial
from typing import Any

from agentserve.bench.common.policy import DEFAULT_TURN_ORDER
from agentserve.bench.papers.replay.slo import SLO
from agentserve.fabric.profiles import load_profile
from agentserve.plan import workload as plan_workload
from agentserve.plan.colocated import COLOCATED, DEFAULT_LIFECYCLES, STORE, check_lifecycles
from agentserve.plan.deployment import Evaluator, Prices, Trial, economics, rounded
from agentserve.plan.search import Search, Space, verdicts
from agentserve.sim.agentaware.policies import make_aware_policy
from agentserve.sim.config import SimConfig
from agentserve.sim.policies import resolve

# First turns compute their whole prompt (a Mooncake conversation first turn: 9.8K tokens on average,
# 8.5 s of compute alone at p90 on one H800 under the cost model), later turns load theirs and compute
# the append: the two are bounded apart, each with room above what compute alone takes.
DEFAULT_SLO = "ttft_first_p90=30s,ttft_later_p90=3s,tpot_p90=100ms"
DEFAULT_PROFILE = "dualpath-h800"
DEFAULT_POLICIES = ("baseline", "layerwise", "dualpath")
DEFAULT_SNIC_GBPS = (200.0, 400.0, 800.0)
DEFAULT_MAX_GPUS = 256
DEFAULT_TRACE_WINDOW_S = 600.0
LIFECYCLE = {
    STORE: "prefill/decode points: every turn's KV persisted, dropped from the decode engine at the turn's end "
    "(the only lifecycle the prefill/decode simulator models)",
    COLOCATED: "the KV lifecycle policies (scheduler/kv_lifecycle.py, by registry name) keep, pin, offload or "
    "upload the KV a session leaves on its engine during a tool wait; sim agentaware models them on engines "
    "that prefill and decode both, so they are searched on colocated points only (plan/colocated.py); a "
    "colocated first turn computes what a Mooncake first turn would hit of another conversation's blocks",
}


@dataclass(frozen=True)
class PlanSpec:
    workload: str
    slo: str = DEFAULT_SLO
    profile: str = DEFAULT_PROFILE
    model: str = ""  # "" = the profile's target model
    gpu: str = "h800"
    policies: tuple[str, ...] = DEFAULT_POLICIES
    snic_gbps: tuple[float, ...] = DEFAULT_SNIC_GBPS
    max_gpus: int = DEFAULT_MAX_GPUS
    prices: Prices = Prices()
    window_s: float | None = DEFAULT_TRACE_WINDOW_S
    turn_order: str = DEFAULT_TURN_ORDER
    lifecycles: tuple[str, ...] = DEFAULT_LIFECYCLES  # colocated families (none: prefill/decode only)

    def __post_init__(self) -> None:
        SLO.parse(self.slo)
        check_lifecycles(self.lifecycles)
        for name in self.policies:
            resolve(name, self.turn_order)
        if not self.policies or not self.snic_gbps:
            raise ValueError("plan needs at least one policy and one storage-NIC bandwidth")
        if any(not g > 0 for g in self.snic_gbps):
            raise ValueError(f"storage-NIC bandwidths must be positive, got {self.snic_gbps}")
        if self.max_gpus < 2:
            raise ValueError(f"max_gpus must be >= 2 (one prefill and one decode engine), got {self.max_gpus}")
        if self.window_s is not None and not self.window_s > 0:
            raise ValueError(f"window must be positive, got {self.window_s}")

    def base_config(self) -> SimConfig:
        overrides: dict[str, Any] = {"gpu": self.gpu}
        if self.model:
            overrides["model"] = self.model
        return SimConfig.from_profile(load_profile(self.profile), **overrides)


def evaluator(spec: PlanSpec) -> Evaluator:
    draw = partial(plan_workload.load, spec.workload, window_s=spec.window_s)
    return Evaluator(
        workload=draw(0),
        slo=SLO.parse(spec.slo),
        base=spec.base_config(),
        prices=spec.prices,
        turn_order=spec.turn_order,
        draw=lambda seed: draw(seed),
    )


def plan(spec: PlanSpec, progress: bool = False) -> dict[str, Any]:
    started = time.monotonic()
    ev = evaluator(spec)
    search = Search(ev, Space(spec.policies, spec.snic_gbps, spec.max_gpus, spec.lifecycles), progress)
    base = ev.base
    default_snic = base.snic_gbps if base.snic_gbps in spec.snic_gbps else spec.snic_gbps[0]
    first_policy = "dualpath" if "dualpath" in spec.policies else spec.policies[0]
    search.run((first_policy, default_snic))
    chosen, consistency = search.choose()
    trials = [t for (_, seed), t in ev.trials.items() if seed == 0]
    verdicts(trials, chosen)
    return {
        "deployment": None if chosen is None else deployment(chosen, base.gpus_per_node),
        "cost": None if chosen is None else economics(chosen),
        "consistent": bool(consistency.get("consistent")),
        "consistency": consistency,
        "slo": {"spec": spec.slo, **ev.slo.to_json()},
        "workload": {**ev.workload.source, "shape": ev.workload.shape()},
        "regime": {
            "simulator": "agentserve sim (virtual time; docs/sim.md)",
            "profile": spec.profile,
            "cluster": base.to_dict(),
            "prices": {"gpu_hour": spec.prices.gpu_hour, "snic_per_100gbps_node_hour": spec.prices.snic_100g_hour},
            "turn_order": spec.turn_order,
            "lifecycle": LIFECYCLE,
        },
        "search": {
            "space": {
                "policies": list(spec.policies),
                "lifecycles": {STORE: list(spec.policies), COLOCATED: list(spec.lifecycles)},
                "snic_gbps_per_node": list(spec.snic_gbps),
                "prefill_floor": search.p_floor,
                "decode_floor": search.d_floor,
                "max_gpus": spec.max_gpus,
            },
            "method": "per policy and storage-NIC bandwidth: grow from the cost model's floor along the binding "
            "role until a point passes, bisect decode then prefill, then walk the P*(D) staircase while a point "
            "can cost less than the cheapest pass (plan/search.py)",
            "trials": len(ev.trials),
            "families": search.families,
            "trace": [
                t.to_dict()
                for t in sorted(trials, key=lambda t: (t.point.configuration(), t.point.snic_gbps, t.point.gpus))
            ],
        },
        "wall_s": round(time.monotonic() - started, 1),
    }


def deployment(trial: Trial, gpus_per_node: int) -> dict[str, Any]:
    p = trial.point
    settings = make_aware_policy(p.lifecycle).to_dict() if p.colocated else resolve(p.policy).to_dict()
    return {
        **p.to_dict(),
        "nodes": p.nodes(gpus_per_node),
        "policy_settings": settings,
        "attainment": round(trial.attainment, 4),
        "value_over_bound": rounded(trial.ratios),
        "binds": trial.binds,
        "ttft_first_p90_ms": trial.figures["ttft_first_p90_ms"],
        "ttft_later_p90_ms": trial.figures["ttft_later_p90_ms"],
        "tpot_p90_ms": trial.figures["tpot_p90_ms"],
        "prefill_gpu_busy": trial.figures["prefill_gpu_busy"],
        "decode_gpu_busy": trial.figures["decode_gpu_busy"],
    }
