"""Arguments of `agentserve bench replay` and `bench capacity` (no heavy imports: the CLI parser
builds these for every command)."""

from __future__ import annotations

import argparse
from pathlib import Path

# Lengths of real traces overwhelm a CPU: Mooncake's 512-token blocks become 32 tokens (two KV
# blocks, so reuse stays block-aligned), its mean 12k-token prompt 750, its outputs 1/16 too.
DEFAULT_TOKEN_SCALE = 16
DEFAULT_SLO = "ttft_p90=5000ms,tpot_p90=500ms"


def _workload_and_target(p: argparse.ArgumentParser) -> None:
    w = p.add_argument_group("workload")
    w.add_argument(
        "--workload",
        type=Path,
        required=True,
        help="Mooncake JSONL, TraceLab rounds JSONL, or an agentserve workload (see `workload convert`)",
    )
    w.add_argument("--format", dest="fmt", default="auto", choices=["auto", "agentserve", "mooncake", "tracelab"])
    w.add_argument(
        "--token-scale",
        type=int,
        default=None,
        help=f"divide every recorded length by this; must divide the 512-token hash blocks (default: "
        f"{DEFAULT_TOKEN_SCALE} for Mooncake and TraceLab traces, so they run on a CPU; 1 otherwise)",
    )
    w.add_argument("--max-sessions", type=int, help="only the first N sessions by arrival (a Mooncake request is one)")
    w.add_argument(
        "--duration",
        type=float,
        help="replay seconds: recorded arrivals only before this (after --speedup); with --rate or "
        "--concurrency, start no job after this",
    )
    w.add_argument(
        "--tracelab-reuse",
        dest="reuse",
        default="recorded",
        choices=["recorded", "context"],
        help="TraceLab: reuse the recorded prefix (default) or the whole growing context",
    )
    w.add_argument(
        "--no-chain",
        dest="chain",
        action="store_false",
        help="Mooncake: do not make a request wait for the earlier request it extends",
    )
    r = p.add_argument_group("load")
    r.add_argument("--speedup", type=float, default=1.0, help="divide arrival, think and tool times by this")
    r.add_argument("--seed", type=int, default=0)
    t = p.add_argument_group("target")
    t.add_argument(
        "--target",
        choices=["local", "remote"],
        default=None,
        help="local: start every service as local processes on free ports (default without --address)",
    )
    t.add_argument("--decoders", type=int, default=2, help="decode engines of a local target")
    t.add_argument(
        "--profile",
        help="hardware profile of a local target's emulated fabric (profiles/<name>.yaml, "
        "e.g. h800-node; default: the cluster's, unshaped)",
    )
    t.add_argument(
        "--kv-path-policy",
        choices=["dualpath", "always-a", "always-b"],
        help="how a local target's store hits reach the prefill engine (default: the cluster's)",
    )
    t.add_argument("--address", help="scheduler gRPC host:port of a running system (e.g. compose on loopback)")
    t.add_argument("--toolproxy", default="http://127.0.0.1:8080", help="tool proxy URL of a running system")
    t.add_argument(
        "--metrics",
        action="append",
        metavar="NAME=URL",
        help="a service's Prometheus /metrics to sample (repeatable; automatic for a local target)",
    )
    t.add_argument("--phoenix", help="tracing UI URL of a running system: KV bytes by path from its kv.transfer spans")
    o = p.add_argument_group("output")
    o.add_argument("--out", type=Path, help="directory for summary.json/.md, plots (default artifacts/bench/...)")
    o.add_argument("--no-progress", dest="progress", action="store_false")
    o.add_argument("--json", action="store_true", help="print the summary as JSON")


def add_replay_arguments(p: argparse.ArgumentParser) -> None:
    _workload_and_target(p)
    load = p.add_mutually_exclusive_group()
    load.add_argument("--rate", type=float, help="open loop: jobs (conversations, agent teams) per second, Poisson")
    load.add_argument("--concurrency", type=int, help="closed loop: jobs in flight")
    p.add_argument("--slo", default=DEFAULT_SLO, help=f"for goodput (default {DEFAULT_SLO!r})")


def add_capacity_arguments(p: argparse.ArgumentParser) -> None:
    _workload_and_target(p)
    p.add_argument(
        "--slo",
        required=True,
        help="each term a latency bound at a percentile over the turns it applies to, e.g. "
        "ttft_first_p90=4000ms,ttft_later_p90=1000ms,tpot_p90=200ms (metrics: ttft, ttft_first, ttft_later, tt2t, "
        "tpot, e2e); capacity is the highest load at which every term holds, and the report says which binds",
    )
    p.add_argument(
        "--load",
        choices=["rate", "concurrency", "speedup"],
        default="concurrency",
        help="what to raise: open-loop job rate, closed-loop jobs in flight, or recorded-time speedup",
    )
    p.add_argument("--start", type=float, default=1.0, help="first load probed")
    p.add_argument("--factor", type=float, default=2.0, help="geometric ramp factor")
    p.add_argument("--max-load", type=float)
    p.add_argument("--tolerance", type=float, default=0.05, help="stop when the bracket is within this share")
    p.add_argument("--max-probes", type=int, default=10)
