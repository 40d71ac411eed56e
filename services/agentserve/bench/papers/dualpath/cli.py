"""`agentserve bench dualpath`: argparse namespace -> bench (or sweep) -> report files and output."""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from agentserve.bench.common.cluster import ClusterSpec
from agentserve.bench.papers.dualpath.bench import BenchSpec, run_bench
from agentserve.bench.papers.dualpath.report import write_report
from agentserve.bench.papers.dualpath.runs import OnlineSpec
from agentserve.bench.papers.dualpath.workload import AgentWorkloadSpec
from agentserve.bench.papers.replay.slo import SLO
from agentserve.cluster.settings import ComputeSettings
from agentserve.engine.emulation_config import EmulationConfig

if TYPE_CHECKING:
    from agentserve.bench.papers.dualpath.kv_pool import PoolPlan
    from agentserve.fabric.profiles import HardwareProfile

# Emulated engines at this dilation spend ~nothing in the cost model: the run's time is what the
# processes themselves take (and the NICs, dilated by it too, are effectively unshaped).
FLOOR_TIME_DILATION = 1e-4
TARGET_GPU = "h800"  # the dualpath-h800 profile's GPU
WALL_BUDGET_S = 1200


def _pool(args: argparse.Namespace, agents: int | None = None, final_context: int | None = None) -> PoolPlan | None:
    """The emulated engines' pools for `agents` agents growing to `final_context` (default: the args')."""
    from agentserve.bench.papers.dualpath.kv_pool import plan

    if args.compute == "real" or args.kv_pool_tokens == 0:
        return None
    return plan(
        args.target_model,
        TARGET_GPU,
        args.block_size,
        agents or args.agents,
        args.prefill,
        args.decoders,
        final_context or args.final_context,
        args.kv_pool_tokens,
    )


def pool_blocks(pool: PoolPlan | None) -> tuple[int, int]:
    """(prefill, decode) engines' `kv_blocks`: each role's pool; 0 (the target GPU's) without a plan."""
    return (pool.prefill_blocks, pool.decode_blocks) if pool else (0, 0)


def with_pools(spec: BenchSpec, args: argparse.Namespace, agents: int, final_context: int) -> BenchSpec:
    """`spec` with the pools for another point of a sweep (a longer context needs a larger prefill
    pool), and the storage regime of its workload."""
    from agentserve.fabric.profiles import load_profile

    pool = _pool(args, agents, final_context)
    prefill, decode = pool_blocks(pool)
    cluster = dataclasses.replace(spec.cluster, prefill_kv_blocks=prefill, decode_kv_blocks=decode)
    regime = {**spec.regime, "kv_pool": pool.to_dict() if pool else spec.regime.get("kv_pool")}
    storage = _storage_modelled(args, spec.workload, load_profile(args.profile))
    return dataclasses.replace(spec, cluster=cluster, regime=regime, storage_modelled=storage)


def compute_settings(args: argparse.Namespace) -> ComputeSettings:
    """Every engine's compute: the real model, or the target model on the dualpath profile's GPU
    (a bad target model or dilation fails here, naming the setting)."""
    if args.compute == "real":
        return ComputeSettings(kv_dtype=args.kv_dtype)
    emulation = EmulationConfig(target_model=args.target_model, target_gpu=TARGET_GPU, time_dilation=args.time_dilation)
    return ComputeSettings("emulated", emulation, kv_dtype=args.kv_dtype)


def time_dilation(args: argparse.Namespace) -> float | None:
    """Local seconds per target second, or None when each engine measures its own."""
    if args.compute == "emulated":
        return args.time_dilation
    if not args.local_prefill_tokens_per_s:
        return None
    from agentserve.fabric.profiles import load_profile

    target = load_profile(args.profile).target
    return target.prefill_tokens_per_s / args.local_prefill_tokens_per_s if target else 1.0


def local_slo(target_slo: SLO, dilation: float | None) -> SLO:
    scale = dilation or 1.0
    return SLO(tuple((m, b * scale) for m, b in target_slo.bounds_s), target_slo.attainment)


def bench_spec(args: argparse.Namespace) -> BenchSpec:
    dilation = time_dilation(args)
    target_slo = SLO.parse(args.slo)
    online = (
        OnlineSpec(
            local_slo(target_slo, dilation),
            duration_s=args.online_duration,
            start_rate=args.online_start,
            max_rate=args.online_max,
            max_probes=args.online_probes,
            turns=args.online_turns,
        )
        if args.online
        else None
    )
    pool = _pool(args)
    prefill_kv_blocks, decode_kv_blocks = pool_blocks(pool)
    floor = {"time_dilation": FLOOR_TIME_DILATION} if args.floor and args.compute == "emulated" else None
    from agentserve.fabric.profiles import load_profile

    profile = load_profile(args.profile)
    workload = AgentWorkloadSpec(
        agents=args.agents,
        turns=args.turns,
        first_context=args.first_context,
        final_context=args.final_context,
        output_tokens=args.output_tokens,
        shared_prefix=args.shared_prefix,
        seed=args.seed,
    )
    return BenchSpec(
        workload=workload,
        cluster=ClusterSpec(
            prefill=args.prefill,
            decoders=args.decoders,
            profile=args.profile,
            block_size=args.block_size,
            tail_blocks=args.tail_blocks,
            turn_order=args.turn_order,
            local_prefill_tokens_per_s=args.local_prefill_tokens_per_s,
            compute=compute_settings(args),
            prefill_kv_blocks=prefill_kv_blocks,
            decode_kv_blocks=decode_kv_blocks,
            load_order=args.load_order,
        ),
        online=online,
        policies=tuple(p.strip() for p in args.policies.split(",") if p.strip()),
        floor_settings=floor,
        concurrent=args.concurrent,
        storage_modelled=_storage_modelled(args, workload, profile),
        regime={
            "compute": args.compute,
            "target_model": args.target_model if args.compute == "emulated" else None,
            "kv_dtype": args.kv_dtype,
            "profile": profile.name,
            "profile_description": profile.description,
            "node": profile.node.to_dict() if profile.node else None,
            "time_dilation": dilation,
            "kv_pool": pool.to_dict() if pool else "the target GPU's (or the real model's) whole pool",
            "time_dilation_note": "local seconds per target second; bandwidths are divided by it and SLO bounds "
            "multiplied"
            if dilation
            else "each engine measured its own compute speed (pass --local-prefill-tokens-per-s to fix it)",
            "slo_target": str(target_slo),
            # What the default invocation is sized to take on a 2-core machine (cli_args); the
            # result's wall_s and the machine's load say what it took.
            "wall_budget_s": WALL_BUDGET_S,
            "cpu_floor": f"dualpath offline with time_dilation {FLOOR_TIME_DILATION:g}" if floor else None,
        },
    )


def _storage_modelled(
    args: argparse.Namespace, workload: AgentWorkloadSpec, profile: HardwareProfile
) -> dict[str, Any] | None:
    """Emulated compute: the storage regime the workload puts the cluster in (`regime.modelled`)."""
    if args.compute != "emulated":
        return None
    from agentserve.bench.papers.dualpath.regime import modelled
    from agentserve.bench.papers.dualpath.workload import generate
    from agentserve.engine.emulation_config import EmulationConfig

    cost = EmulationConfig(target_model=args.target_model, target_gpu=TARGET_GPU).cost(args.kv_dtype)
    return modelled(generate(workload), cost, profile, args.prefill, args.decoders, args.block_size, args.tail_blocks)


def _out_dir(args: argparse.Namespace, kind: str) -> Path:
    return args.out or Path("artifacts") / "bench" / f"{kind}-{time.strftime('%Y%m%d-%H%M%S')}"


def dualpath(args: argparse.Namespace) -> dict | None:
    if args.sweep:
        from agentserve.bench.papers.dualpath.sweep import run_sweep

        return run_sweep(args, _out_dir(args, "dualpath-sweep"))
    spec = bench_spec(args)
    out_dir = _out_dir(args, "dualpath")
    result = asyncio.run(run_bench(spec, progress=args.progress))
    write_report(result, out_dir)
    print(
        f"agentserve bench dualpath: results in {out_dir}/ (dualpath.md, dualpath.json, plots) at "
        f"{time.strftime('%H:%M:%S')}",
        file=sys.stderr,
    )
    if args.json:
        return result
    print((out_dir / "dualpath.md").read_text())
    return None
