"""`agentserve bench agentaware`: argparse namespace -> bench -> report files and output."""

from __future__ import annotations

import argparse
import asyncio
import sys
import time
from pathlib import Path
from typing import Any

from agentserve.bench.common.cluster import ClusterSpec
from agentserve.bench.papers.agentaware.bench import BenchSpec, run_bench
from agentserve.bench.papers.agentaware.cli_args import WALL_BUDGET_S, add_arguments, workload_spec
from agentserve.bench.papers.agentaware.report import write_report
from agentserve.cluster.settings import ComputeSettings
from agentserve.engine.emulation_config import EmulationConfig


def _floats(text: str, name: str) -> tuple[float, ...]:
    try:
        return tuple(float(x) for x in text.split(",") if x.strip())
    except ValueError:
        raise ValueError(f"--{name} takes comma-separated numbers, got {text!r}") from None


def args_differing_from_defaults(args: argparse.Namespace) -> dict[str, Any]:
    """The arguments this run set away from the default invocation's (output paths aside)."""
    parser = argparse.ArgumentParser()
    add_arguments(parser)
    defaults = vars(parser.parse_args([]))
    return {k: v for k, v in vars(args).items() if k in defaults and k not in ("out", "json") and defaults[k] != v}


def block_bytes(target_model: str, block_size: int) -> int:
    from agentserve.costmodel.models import target_model as model_named

    return model_named(target_model).kv_bytes_per_token * block_size


def bench_spec(args: argparse.Namespace) -> BenchSpec:
    if args.kv_pool_tokens < args.block_size:
        raise ValueError(
            f"--kv-pool-tokens must hold at least one block ({args.block_size}), got {args.kv_pool_tokens}"
        )
    kv_blocks = -(-args.kv_pool_tokens // args.block_size)
    # A bad target or dilation fails here, naming the setting.
    emulation = EmulationConfig(args.target_model, args.target_gpu, time_dilation=args.time_dilation)
    workload = workload_spec(args)
    return BenchSpec(
        workload=workload,
        cluster=ClusterSpec(
            prefill=args.prefill,
            decoders=args.decoders,
            profile=args.profile,
            block_size=args.block_size,
            compute=ComputeSettings("emulated", emulation),
            prefill_kv_blocks=kv_blocks,
            decode_kv_blocks=kv_blocks,
        ),
        trace=args.trace,
        rates=_floats(args.rates, "rates"),
        time_dilation=args.time_dilation,
        block_bytes=block_bytes(args.target_model, args.block_size),
        policies=tuple(p.strip() for p in args.policies.split(",") if p.strip()),
        regime={
            "compute": "emulated",
            "target_model": args.target_model,
            "target_gpu": args.target_gpu,
            "kv_pool_tokens_per_engine": args.kv_pool_tokens,
            "kv_blocks_per_engine": kv_blocks,
            # The default invocation's scale and wall budget on the 2-core machine (cli_args).
            "default_wall_budget_s": WALL_BUDGET_S,
            "default_scale": args_differing_from_defaults(args) == {},
        },
    )


def kv_budget(result: dict) -> dict[str, Any]:
    """The engines' KV memory beside the workload's working set: every agent's final context
    (all of a job's agents are live until it ends), per job and in all."""
    regime = result["regime"]
    shape, cluster = regime["workload_shape"], regime["cluster"]
    pool = regime["kv_pool_tokens_per_engine"]
    per_job = shape["final_context_tokens_total"] / max(1, shape["jobs"])
    budget = {
        "decode_pool_tokens_total": pool * cluster["decode_engines"],
        "prefill_pool_tokens_total": pool * cluster["prefill_engines"],
        "working_set_tokens_per_job": round(per_job),
        "working_set_tokens_all_jobs": shape["final_context_tokens_total"],
        "jobs_whose_working_set_fits_decode_pools": round(pool * cluster["decode_engines"] / per_job, 2),
    }
    lru = (result["policies"].get("lru") or {}).get("runs") or {}
    run = lru.get(str(result.get("compared_at_rate_jobs_per_s"))) or {}
    if run.get("duration_s"):
        live = sum(run["job_latencies_s"]) / run["duration_s"]  # jobs in the system, time-averaged
        budget["lru_jobs_in_system_mean_at_middle_rate"] = round(live, 2)
        budget["lru_live_working_set_tokens_at_middle_rate"] = round(live * per_job)
    return budget


def agentaware(args: argparse.Namespace) -> dict | None:
    spec = bench_spec(args)
    out_dir: Path = args.out or Path("artifacts") / "bench" / f"agentaware-{time.strftime('%Y%m%d-%H%M%S')}"
    result = asyncio.run(run_bench(spec))
    result["regime"]["kv_budget"] = kv_budget(result)
    write_report(result, out_dir)
    print(
        f"agentserve bench agentaware: results in {out_dir}/ (agentaware.md, agentaware.json, plots)", file=sys.stderr
    )
    if args.json:
        return result
    print((out_dir / "agentaware.md").read_text())
    return None
