"""Arguments of `agentserve workload convert` and `workload generate` (no heavy imports)."""

from __future__ import annotations

import argparse
from pathlib import Path


def add_convert_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("input", type=Path, help="Mooncake or TraceLab JSONL")
    p.add_argument("--out", type=Path, required=True, help="agentserve workload JSONL to write")
    p.add_argument("--format", dest="fmt", default="auto", choices=["auto", "mooncake", "tracelab"])
    p.add_argument("--limit", type=int, help="Mooncake: only the first N requests")
    p.add_argument("--tracelab-reuse", dest="reuse", default="recorded", choices=["recorded", "context"])
    p.add_argument(
        "--no-chain",
        dest="chain",
        action="store_false",
        help="Mooncake: no dependency on the earlier request a prompt extends",
    )
    p.add_argument("--json", action="store_true")


def add_generate_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--out", type=Path, required=True, help="agentserve workload JSONL to write")
    p.add_argument("--pattern", default="fanout", choices=["independent", "fanout", "allgather"])
    p.add_argument("--teams", type=int, default=4, help="independent jobs (agent teams)")
    p.add_argument("--agents", type=int, default=3, help="agents per team (fanout: workers besides the lead)")
    p.add_argument("--turns", type=int, default=4, help="turns per agent (fanout/allgather: rounds)")
    p.add_argument("--system-tokens", type=int, default=2048, help="shared system prompt (0: none)")
    p.add_argument("--first-tokens", type=int, default=1024, help="new tokens of an agent's first turn")
    p.add_argument("--new-tokens", type=int, default=256, help="mean new tokens of a later turn (context growth)")
    p.add_argument("--output-tokens", type=int, default=128)
    p.add_argument("--tool-prob", type=float, default=0.5, help="chance of a tool call after a turn")
    p.add_argument(
        "--tool-time",
        default="exp:2.0",
        help="tool call seconds: const:X, exp:MEAN, uniform:LO,HI or lognormal:MEDIAN,SIGMA",
    )
    p.add_argument("--arrival-rate", type=float, default=0.0, help="teams per second, Poisson (0: all at once)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--json", action="store_true")
