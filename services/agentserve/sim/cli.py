"""`agentserve sim ...`: arguments, then the simulation, then its JSON (and report files)."""

from __future__ import annotations

import argparse
import dataclasses
import json
from typing import Any

from agentserve.fabric.profiles import load_profile
from agentserve.sim.config import SimConfig
from agentserve.sim.dualpath import DualPathSimSpec, run_dualpath
from agentserve.sim.workload import PAPER_WORKLOAD


def dualpath_spec(args: argparse.Namespace) -> DualPathSimSpec:
    workload = dataclasses.replace(
        PAPER_WORKLOAD,
        agents=args.agents,
        turns=args.turns,
        first_context=args.first_context,
        final_context=args.final_context,
        shared_prefix=args.shared_prefix,
        output_tokens=args.output_tokens,
        seed=args.seed,
    )
    overrides: dict[str, Any] = {
        "block_size": args.block_size,
        "layer_groups": args.layer_groups,
        "gpu": args.gpu,
        "kv_dtype": args.kv_dtype,
        "prefill_pool_blocks": args.prefill_pool_blocks,
        "decode_pool_blocks": args.decode_pool_blocks,
    }
    if args.model:
        overrides["model"] = args.model
    policies = tuple(p for p in args.policies.split(",") if p)
    return DualPathSimSpec(
        workload=workload,
        config=SimConfig.from_profile(load_profile(args.profile), **overrides),
        profile=args.profile,
        policies=policies,
        turn_order=args.turn_order,
        tool_wait_s=args.tool_wait,
        online=args.online,
        online_policies=tuple(p for p in ("baseline", "dualpath") if p in policies),
        online_turns=args.online_turns,
        online_duration_s=args.online_duration,
        online_start=args.online_start,
        online_tolerance=args.online_tolerance,
        slo=args.slo,
    )


def dualpath(args: argparse.Namespace) -> dict[str, Any]:
    from agentserve.sim.report import write_result

    if args.sweep:
        from agentserve.sim.sweep import run_sweep, write_sweep

        swept = run_sweep(dualpath_spec(args), args.sweep_agents, args.sweep_contexts, progress=args.progress)
        if args.out is not None:
            write_sweep(swept, args.out)
        return swept
    result = run_dualpath(dualpath_spec(args), progress=args.progress)
    if args.out is not None:
        write_result(result, args.out)
    return result


def validate(args: argparse.Namespace) -> dict[str, Any]:
    import time
    from pathlib import Path

    from agentserve.sim.validate import run_checks, summary
    from agentserve.sim.validate import validate as stored

    if args.emulated is not None:
        for path in args.emulated:
            if not path.is_file():
                raise ValueError(f"--emulated {path}: no such file (a bench dualpath result JSON)")
        return summary({str(path): stored(path) for path in args.emulated})
    out = args.out or Path("artifacts") / "sim" / f"validate-{time.strftime('%Y%m%d-%H%M%S')}"
    names = tuple(n for n in args.configs.split(",") if n)
    result = run_checks(names, out, args.policies)
    out.mkdir(parents=True, exist_ok=True)
    (out / "validate.json").write_text(json.dumps(result, indent=2, sort_keys=True) + "\n")
    return result


def agentaware(args: argparse.Namespace) -> dict[str, Any]:
    from agentserve.bench.papers.agentaware.cli_args import workload_spec
    from agentserve.bench.papers.agentaware.workload import read_tool_sample
    from agentserve.sim.agentaware.bench import AwareBenchSpec, run_bench
    from agentserve.sim.agentaware.config import AwareConfig
    from agentserve.sim.agentaware.report import write_report

    spec = AwareBenchSpec(
        config=AwareConfig(
            model=args.model,
            gpu=args.gpu,
            engines=args.engines,
            engines_per_node=args.engines_per_node,
            snic_gbps=args.snic_gbps,
            block_size=args.block_size,
            chunk_tokens=args.chunk_tokens,
            pool_blocks_per_engine=args.pool_blocks,
        ),
        workload=workload_spec(args),
        rates=args.rates,
        policies=tuple(p for p in args.policies.split(",") if p),
        compare_rate=args.compare_rate,
        seed=args.seed,
    )
    result = run_bench(spec, read_tool_sample(args.trace))
    if args.out is not None:
        write_report(result, args.out)
    return result
