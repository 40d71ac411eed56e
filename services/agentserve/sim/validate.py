"""`agentserve sim validate`: a stored emulated `bench dualpath` run, simulated as it ran, metric by
metric.

The emulated run's JSON states its regime (engines, pools, profile, workload, time dilation); the
simulator runs the same configuration (`SimConfig` with the run's engine counts and pools, no tool
waits, the run's turn and load order) for every policy the run has offline figures for. Emulated
times are local seconds, `time_dilation` times the target's, so they are divided by it before the
comparison. The relative error is (simulated - emulated) / emulated; `ranking_agrees` is whether the
two order the policies the same by JCT.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from agentserve.bench.papers.dualpath.workload import AgentWorkloadSpec, generate
from agentserve.sim.config import SimConfig
from agentserve.sim.policies import resolve
from agentserve.sim.run import figures, simulate

# metric -> (scale from emulated local units to target units given dilation D, is a p90 latency)
METRICS: dict[str, tuple[str, bool]] = {
    "jct_s": ("time", False),
    "turns_per_s": ("rate", False),
    "ttft_p50_ms": ("time", False),
    "ttft_p90_ms": ("time", True),
    "tpot_p90_ms": ("time", True),
}
BOUND = 0.10  # the bound on mean JCT and throughput
BOUND_P90 = 0.15  # on p90 latencies


def emulated_config(result: dict[str, Any]) -> tuple[SimConfig, AgentWorkloadSpec, dict[str, str], float]:
    """The simulator's configuration of a stored `bench dualpath` run: config, workload, orders, dilation."""
    regime = result["regime"]
    cluster, node, pool, w = regime["cluster"], regime["node"], regime.get("kv_pool") or {}, regime["workload"]
    # `bench dualpath` starts its clusters without `shared_snic` (cluster/settings.py): each engine's
    # storage NIC is its static share of the node's, alone, so each is simulated as a node of one.
    config = SimConfig(
        model=regime["target_model"],
        gpu=cluster["engine_settings"]["target_gpu"],
        gpus_per_node=1,
        snic_gbps=node["snic_gbps"] * node["storage_nics_per_node"] / node["gpus_per_node"],
        cnic_gbps=node["cnic_gbps_per_gpu"],
        block_size=cluster["kv_block_tokens"],
        prefill_engines=cluster["prefill_engines"],
        decode_engines=cluster["decode_engines"],
        prefill_pool_blocks=pool.get("prefill_kv_blocks", 0),
        decode_pool_blocks=pool.get("decode_kv_blocks", 0),
    )
    workload = AgentWorkloadSpec(
        agents=w["agents"],
        turns=w["turns_per_agent"],
        first_context=w["first_context_tokens"],
        final_context=w["final_context_tokens"],
        output_tokens=w["output_tokens_per_turn"],
        shared_prefix=w["shared_prefix_tokens"],
        seed=w["seed"],
    )
    orders = {"turn_order": cluster["turn_order"], "load_order": cluster["prefill_settings"]["load_order"]}
    return config, workload, orders, float(regime["time_dilation"])


def _target(value: float | None, kind: str, dilation: float) -> float | None:
    if value is None:
        return None
    return value / dilation if kind == "time" else value * dilation


def validate(path: Path) -> dict[str, Any]:
    result = json.loads(path.read_text())
    config, spec, orders, dilation = emulated_config(result)
    workload = generate(spec)
    per_policy: dict[str, Any] = {}
    errors: list[float] = []
    errors_p90: list[float] = []
    for name, run in result["policies"].items():
        emulated = run.get("offline") or {}
        if emulated.get("jct_s") is None:
            continue
        simulated = figures(simulate(config, resolve(name, orders["turn_order"], orders["load_order"]), workload))
        rows = {}
        for metric, (kind, p90) in METRICS.items():
            emu, sim = _target(emulated.get(metric), kind, dilation), simulated.get(metric)
            rel = (sim - emu) / emu if emu and sim is not None else None
            rows[metric] = {"emulated": emu, "simulated": sim, "rel_error": rel}
            if rel is not None and metric != "ttft_p50_ms":
                (errors_p90 if p90 else errors).append(abs(rel))
        per_policy[name] = rows
    rank = {side: sorted(per_policy, key=lambda n: per_policy[n]["jct_s"][side]) for side in ("emulated", "simulated")}
    max_rel = max(errors, default=None)
    max_rel_p90 = max(errors_p90, default=None)
    return {
        "emulated_run": str(path),
        "config": config.to_dict(),
        "workload": spec.to_dict(),
        "time_dilation": dilation,
        "policies": per_policy,
        "max_rel_error": max_rel,
        "max_rel_error_p90": max_rel_p90,
        "bounds": {"max_rel_error": BOUND, "max_rel_error_p90": BOUND_P90},
        "within_bounds": max_rel is not None and max_rel <= BOUND and (max_rel_p90 or 0) <= BOUND_P90,
        "ranking": rank,
        "ranking_agrees": rank["emulated"] == rank["simulated"],
    }
