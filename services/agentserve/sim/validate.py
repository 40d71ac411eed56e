"""`agentserve sim validate`: small configurations run on the emulated cluster (`bench dualpath`, one
policy's cluster at a time) and simulated as they ran, metric by metric; or a stored emulated run.

The emulated run's JSON states its regime (engines, pools, profile, workload, time dilation); the
simulator runs the same configuration (`SimConfig` with the run's engine counts and pools, no tool
waits, the run's turn and load order) for every policy the run has offline figures for. Emulated
times are local seconds, `time_dilation` times the target's, so they are divided by it before the
comparison. The relative error is (simulated - emulated) / emulated; `ranking_agrees` is whether the
two order the policies the same by JCT.
"""

from __future__ import annotations

import json
import os
import sys
import time
from dataclasses import dataclass
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


@dataclass(frozen=True)
class Check:
    """One small configuration: the `bench dualpath` arguments it runs with (every policy's cluster
    started alone, no capacity search, no CPU floor), and what it exercises."""

    name: str
    what: str
    bench_args: tuple[str, ...]


# Contexts of 8K to 12K tokens on DeepSeek-V3.2: a later turn reads ~0.5 GB (0.08 target s at an
# engine's 50 Gbps share, 0.8 s local at the bench's time dilation of 10) and computes ~0.07 s,
# so modelled time, not the processes' own, is most of a turn; 256-token blocks keep the per-block
# work small. Four agents of six turns keep each prefill engine's queue non-empty.
def _small(agents: int = 4, turns: int = 6) -> tuple[str, ...]:
    return (
        *("--agents", str(agents), "--turns", str(turns), "--output-tokens", "8", "--block-size", "256"),
        *("--first-context", "8192", "--final-context", "12288", "--shared-prefix", "7680"),
    )


CHECKS = {
    c.name: c
    for c in (
        Check(
            "pool-bound",
            "1 prefill + 2 decode engines, a prefill pool of 1.25 final contexts (bench dualpath's regime: "
            "without layerwise a prefill engine loads, then computes, one turn at a time)",
            ("--prefill", "1", "--decoders", "2", *_small()),
        ),
        Check(
            "full-hbm",
            "1 prefill + 2 decode engines, every pool the H800's whole HBM (the paper's scale's regime: "
            "loads of many turns overlap other turns' compute with or without layerwise)",
            ("--prefill", "1", "--decoders", "2", "--kv-pool-tokens", "0", *_small()),
        ),
        Check(
            "two-prefill",
            "2 prefill + 4 decode engines (bench dualpath's topology), pools as pool-bound, 6 agents",
            ("--prefill", "2", "--decoders", "4", *_small(agents=6)),
        ),
        Check(
            "smoke",
            "1 prefill + 1 decode engine, 2 agents of 4 turns at time dilation 30: the smallest, "
            "about ten minutes of two clusters served one after the other",
            ("--prefill", "1", "--decoders", "1", *_small(agents=2, turns=4), "--time-dilation", "30"),
        ),
    )
}


def emulated_config(result: dict[str, Any]) -> tuple[SimConfig, AgentWorkloadSpec, dict[str, str], float]:
    """The simulator's configuration of a stored `bench dualpath` run: config, workload, orders, dilation."""
    regime = result["regime"]
    cluster, node, w = regime["cluster"], regime["node"], regime["workload"]
    # The cluster's settings as `ClusterSpec.to_dict` writes them, or as runs before it did.
    emulation = cluster.get("emulation") or cluster["engine_settings"]
    pool = regime.get("kv_pool") if isinstance(regime.get("kv_pool"), dict) else {}
    prefill_blocks = cluster.get("prefill_kv_blocks", pool.get("prefill_kv_blocks", 0))
    decode_blocks = cluster.get("decode_kv_blocks", pool.get("decode_kv_blocks", 0))
    load_order = cluster.get("load_order") or cluster["prefill_settings"]["load_order"]
    # `bench dualpath` starts its clusters without `shared_snic` (cluster/settings.py): each engine's
    # storage NIC is its static share of the node's, alone, so each is simulated as a node of one.
    config = SimConfig(
        model=regime["target_model"],
        gpu=emulation["target_gpu"],
        gpus_per_node=1,
        snic_gbps=node["snic_gbps"] * node["storage_nics_per_node"] / node["gpus_per_node"],
        cnic_gbps=node["cnic_gbps_per_gpu"],
        block_size=cluster["kv_block_tokens"],
        prefill_engines=cluster["prefill_engines"],
        decode_engines=cluster["decode_engines"],
        prefill_pool_blocks=prefill_blocks,
        decode_pool_blocks=decode_blocks,
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
    orders = {"turn_order": cluster["turn_order"], "load_order": load_order}
    return config, workload, orders, float(regime["time_dilation"])


def _target(value: float | None, kind: str, dilation: float) -> float | None:
    if value is None:
        return None
    return value / dilation if kind == "time" else value * dilation


def compare(result: dict[str, Any]) -> dict[str, Any]:
    """A `bench dualpath` result beside the simulator's run of its configuration, policy by policy."""
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
        "config": config.to_dict(),
        "workload": spec.to_dict(),
        "time_dilation": dilation,
        "machine": result.get("machine"),
        "policies": per_policy,
        "max_rel_error": max_rel,
        "max_rel_error_p90": max_rel_p90,
        "bounds": {"max_rel_error": BOUND, "max_rel_error_p90": BOUND_P90},
        "within_bounds": max_rel is not None and max_rel <= BOUND and (max_rel_p90 or 0) <= BOUND_P90,
        "ranking": rank,
        "ranking_agrees": rank["emulated"] == rank["simulated"],
    }


def validate(path: Path) -> dict[str, Any]:
    """A stored `bench dualpath` result (its JSON at `path`) beside the simulator's run of it."""
    return {"emulated_run": str(path), **compare(json.loads(path.read_text()))}


def run_emulated(check: Check, out_dir: Path, policies: str = "") -> dict[str, Any]:
    """`check`'s configuration on the emulated cluster: `bench dualpath`, every policy's cluster
    started and served alone (`--one-at-a-time`), offline only; its report files in `out_dir`."""
    import argparse

    from agentserve.bench.papers.dualpath.cli import dualpath
    from agentserve.bench.papers.dualpath.cli_args import add_arguments

    argv = [*check.bench_args, "--no-online", "--no-floor", "--one-at-a-time"]
    argv += ["--out", str(out_dir), "--json"] + (["--policies", policies] if policies else [])
    parser = argparse.ArgumentParser(prog="agentserve bench dualpath")
    add_arguments(parser)
    result: dict[str, Any] | None = dualpath(parser.parse_args(argv))
    assert result is not None  # --json: the result comes back
    return result


def run_checks(names: tuple[str, ...], out_dir: Path, policies: str = "") -> dict[str, Any]:
    """Each named check run emulated (its files under `out_dir/<name>/`) and simulated, compared."""
    unknown = [n for n in names if n not in CHECKS]
    if unknown:
        raise ValueError(f"unknown validation configs {unknown}; choose from {', '.join(CHECKS)}")
    checks: dict[str, Any] = {}
    for name in names:
        check = CHECKS[name]
        load = os.getloadavg()
        started = time.monotonic()
        print(f"sim validate: {name}: emulated run ({check.what})", file=sys.stderr, flush=True)
        result = run_emulated(check, out_dir / name, policies)
        checks[name] = {
            "what": check.what,
            "bench_args": list(check.bench_args),
            "emulated_run": str(out_dir / name / "dualpath.json"),
            "emulated_wall_s": round(time.monotonic() - started, 1),
            "load_avg_at_start": [round(x, 2) for x in load],
            **compare(result),
        }
    return summary(checks)


def summary(checks: dict[str, Any]) -> dict[str, Any]:
    """The checks and, over all of them, the largest errors and whether every ranking agrees."""
    errors = [c["max_rel_error"] for c in checks.values() if c["max_rel_error"] is not None]
    errors_p90 = [c["max_rel_error_p90"] for c in checks.values() if c["max_rel_error_p90"] is not None]
    return {
        "configs": checks,
        "max_rel_error": max(errors, default=None),
        "max_rel_error_p90": max(errors_p90, default=None),
        "bounds": {"max_rel_error": BOUND, "max_rel_error_p90": BOUND_P90},
        "within_bounds": bool(checks) and all(c["within_bounds"] for c in checks.values()),
        "ranking_agrees": bool(checks) and all(c["ranking_agrees"] for c in checks.values()),
    }
