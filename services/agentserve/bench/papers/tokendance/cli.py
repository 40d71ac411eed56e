"""`agentserve bench tokendance`: flags -> BenchSpec -> one run -> report files and the result."""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

from agentserve.bench.papers.tokendance.bench import BenchSpec, run_bench
from agentserve.bench.papers.tokendance.capacity import CapacitySpec
from agentserve.bench.papers.tokendance.report import write_report
from agentserve.bench.papers.tokendance.served import BUDGET_SWEEP, ServedSpec
from agentserve.contracts.segments import DEFAULT_RECOMPUTE_FRACTION


def add_arguments(p: argparse.ArgumentParser) -> None:
    w = p.add_argument_group("workloads")
    w.add_argument("--agents", type=int, default=32, help="GenerativeAgents-shaped agents (default 32)")
    w.add_argument("--society-agents", type=int, default=64, help="AgentSociety-shaped agents (default 64)")
    w.add_argument("--rounds", type=int, default=5, help="gather rounds (default 5)")
    w.add_argument(
        "--recompute-fraction",
        type=float,
        default=DEFAULT_RECOMPUTE_FRACTION,
        help=f"share of each shared block recomputed (default {DEFAULT_RECOMPUTE_FRACTION}, the engine's)",
    )
    s = p.add_argument_group("capacity served on the trained default model")
    s.add_argument(
        "--served-token-scale", type=int, default=ServedSpec.token_scale, help="served rounds' tokens divided by this"
    )
    s.add_argument(
        "--served-slo-s", type=float, help="round latency SLO (default: prefix caching's at the workload's size)"
    )
    s.add_argument(
        "--served-budget-fraction",
        type=float,
        default=ServedSpec.budget_fraction,
        help="KV budget as a fraction of prefix caching's KV with every agent of the workload resident "
        f"(default {ServedSpec.budget_fraction}: half the agents' contexts fit, memory binds for the baseline)",
    )
    s.add_argument(
        "--served-budget-sweep",
        action="store_true",
        help=f"also measure every policy at budget fractions {BUDGET_SWEEP}",
    )
    s.add_argument("--served-budget-tokens", type=float, help="KV budget in tokens (instead of a fraction)")
    c = p.add_argument_group("capacity at target scale (cost model)")
    c.add_argument("--target-model", default=CapacitySpec.target_model)
    c.add_argument("--target-gpu", default=CapacitySpec.target_gpu)
    c.add_argument("--kv-gpus", type=int, default=CapacitySpec.kv_gpus, help="GPUs whose KV capacity is the budget")
    c.add_argument("--slo-s", type=float, default=CapacitySpec.slo_s, help="TTFT SLO of every agent of every round")
    e = p.add_argument_group("real engine (larger runs: lower --engine-token-scale, more --quality-*)")
    e.add_argument("--engine-token-scale", type=int, default=BenchSpec.engine_token_scale)
    e.add_argument("--engine-round", type=int, default=BenchSpec.engine_round, help="gather round to prefill")
    e.add_argument("--quality-agents", type=int, default=BenchSpec.quality_agents)
    e.add_argument("--quality-rounds", type=int, default=BenchSpec.quality_rounds)
    e.add_argument("--storage-segments", type=int, default=BenchSpec.storage_segments)
    e.add_argument(
        "--real-quality-lengths",
        type=int,
        nargs="*",
        default=list(BenchSpec.real_quality_lengths),
        help="prompt lengths of the quality run on SmolLM2-135M-Instruct (none: skip it)",
    )
    e.add_argument("--threads", type=int, default=BenchSpec.threads, help="torch threads for the real engine")
    p.add_argument("--out", type=Path, help="results directory (default artifacts/bench/papers/tokendance-<time>)")
    p.add_argument("--json", action="store_true", help="print the result as one line of JSON")


def bench_spec(args: argparse.Namespace) -> BenchSpec:
    capacity = CapacitySpec(
        target_model=args.target_model, target_gpu=args.target_gpu, kv_gpus=args.kv_gpus, slo_s=args.slo_s
    )
    capacity.budget_tokens()  # an unknown model or GPU fails before any measurement
    return BenchSpec(
        agents=args.agents,
        society_agents=args.society_agents,
        rounds=args.rounds,
        recompute_fraction=args.recompute_fraction,
        capacity=capacity,
        served=ServedSpec(
            token_scale=args.served_token_scale,
            slo_s=args.served_slo_s,
            budget_tokens=args.served_budget_tokens,
            budget_fraction=args.served_budget_fraction,
            budget_sweep=BUDGET_SWEEP if args.served_budget_sweep else (),
        ),
        engine_token_scale=args.engine_token_scale,
        engine_round=args.engine_round,
        quality_agents=args.quality_agents,
        quality_rounds=args.quality_rounds,
        storage_segments=args.storage_segments,
        threads=args.threads,
        real_quality_lengths=tuple(args.real_quality_lengths),
    )


def tokendance(args: argparse.Namespace) -> dict | None:
    spec = bench_spec(args)
    out_dir = args.out or Path("artifacts") / "bench" / f"tokendance-{time.strftime('%Y%m%d-%H%M%S')}"
    result = run_bench(
        spec, log=lambda line: print(f"agentserve bench tokendance: {line}", file=sys.stderr, flush=True)
    )
    write_report(result, out_dir)
    print(
        f"agentserve bench tokendance: results in {out_dir}/ (tokendance.md, tokendance.json, plots)", file=sys.stderr
    )
    if args.json:
        return result
    print((out_dir / "tokendance.md").read_text())
    return None
