"""Arguments of `agentserve bench agentaware` (no heavy imports: the CLI parser builds these for
every command). Defaults are the scale the default invocation runs at on a 2-core machine within
its 20-minute budget (five policies, three rates): 10 jobs of 6-7 agents (65 agents, the issue's
floor is 64), two turns per worker, 32 output tokens, arrivals up to 0.6 jobs/s with the middle
rate below the saturation the 2-core machine showed. Larger runs raise --jobs, --width, --rounds,
--output-tokens or the engines."""

from __future__ import annotations

import argparse
from pathlib import Path

from agentserve.bench.papers.agentaware.workload import DEFAULT_TRACE, PREDICTIONS, AgentAwareSpec

DEFAULT_RATES = "0.2,0.3,0.6"
WALL_BUDGET_S = 1200  # the default invocation on the 2-core machine (issue 14)


def add_arguments(p: argparse.ArgumentParser) -> None:
    w = p.add_argument_group("workload (target tokens and seconds)")
    w.add_argument("--jobs", type=int, default=10, help="jobs, alternately code-writer and deep-research (default 10)")
    w.add_argument("--width", type=int, default=5, help="coders or researchers per job (default 5)")
    w.add_argument("--rounds", type=int, default=2, help="turns per coder, rounds per researcher (default 2)")
    w.add_argument("--system-tokens", type=int, default=2048, help="shared agent system prompt (default 2048)")
    w.add_argument("--first-tokens", type=int, default=1024, help="a session's first message (default 1024)")
    w.add_argument("--new-tokens", type=int, default=384, help="a later turn's message, +-50%% (default 384)")
    w.add_argument("--output-tokens", type=int, default=32, help="output tokens per turn (default 32)")
    w.add_argument(
        "--prediction",
        default="median",
        choices=PREDICTIONS,
        help="what the caller predicts for a tool call: the sample's median for its name (default), the exact "
        "duration (oracle) or nothing",
    )
    w.add_argument("--trace", type=Path, default=DEFAULT_TRACE, help="TraceLab round trace the tool times come from")
    w.add_argument("--seed", type=int, default=0)
    c = p.add_argument_group("cluster")
    c.add_argument("--prefill", type=int, default=1, help="prefill engines (default 1)")
    c.add_argument("--decoders", type=int, default=2, help="decode engines (default 2)")
    c.add_argument("--profile", default="dualpath-h800", help="hardware profile (default dualpath-h800)")
    c.add_argument("--block-size", type=int, default=64, help="tokens per KV block (default 64)")
    c.add_argument("--target-model", default="deepseek-v3.2", help="emulated compute's target model")
    c.add_argument("--target-gpu", default="h800", help="emulated compute's target GPU")
    c.add_argument(
        "--time-dilation",
        type=float,
        default=0.5,
        help="local seconds per target second, for engines and tool times alike (default 0.5)",
    )
    c.add_argument(
        "--kv-pool-tokens",
        type=int,
        default=16384,
        help="KV pool of every engine, target tokens (default 16384: well below the workload's working set)",
    )
    r = p.add_argument_group("runs")
    r.add_argument(
        "--rates",
        default=DEFAULT_RATES,
        help=f"three job arrival rates, jobs per local second (default {DEFAULT_RATES})",
    )
    r.add_argument("--policies", default="", help="comma-separated lifecycle policies (default: every registered one)")
    r.add_argument("--out", type=Path, help="results directory (default artifacts/bench/papers/agentaware-<time>)")
    r.add_argument("--json", action="store_true", help="print the result as JSON")


def workload_spec(args: argparse.Namespace) -> AgentAwareSpec:
    """The jobs the workload arguments describe (`bench agentaware` and `sim agentaware` take the same)."""
    return AgentAwareSpec(
        jobs=args.jobs,
        width=args.width,
        rounds=args.rounds,
        system_tokens=args.system_tokens,
        first_tokens=args.first_tokens,
        new_tokens=args.new_tokens,
        output_tokens=args.output_tokens,
        prediction=args.prediction,
        seed=args.seed,
    )
