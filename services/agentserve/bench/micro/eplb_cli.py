"""`agentserve bench eplb`: its arguments and its command (the bench itself is `eplb`)."""

from __future__ import annotations

import argparse
import json
from pathlib import Path


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--loads", type=Path, help="an engine's --record-expert-load file to replay (default: the Zipf case only)"
    )
    parser.add_argument("--window", type=int, default=32, help="recorded forwards per re-planning window")
    parser.add_argument("--ranks", default="32,64", help="comma-separated GPU counts")
    parser.add_argument("--redundant-per-rank", type=int, default=1, help="EPLB's spare expert slots per GPU")
    parser.add_argument("--zipf-exponent", type=float, default=1.0)
    parser.add_argument("--zipf-windows", type=int, default=12)
    parser.add_argument("--decode-batch", type=int, default=128, help="sequences per GPU in a decode step")
    parser.add_argument("--steps-per-window", type=int, default=8, help="decode steps replayed per window")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", type=Path, help="also write eplb.json and eplb.md into this directory")
    parser.add_argument("--json", action="store_true")


def command(args: argparse.Namespace) -> dict:
    from agentserve.bench.micro import eplb

    try:
        ranks = tuple(int(r) for r in args.ranks.split(","))
    except ValueError:
        raise ValueError(f"--ranks must be comma-separated integers, got {args.ranks!r}") from None
    config = eplb.EplbConfig(
        recorded=args.loads,
        window=args.window,
        ranks=ranks,
        redundant_per_rank=args.redundant_per_rank,
        zipf_exponent=args.zipf_exponent,
        zipf_windows=args.zipf_windows,
        decode_batch=args.decode_batch,
        steps_per_window=args.steps_per_window,
        seed=args.seed,
    )
    result = eplb.run(config)
    if args.out is not None:
        args.out.mkdir(parents=True, exist_ok=True)
        (args.out / "eplb.json").write_text(json.dumps(result, indent=2) + "\n")
        (args.out / "eplb.md").write_text(eplb.markdown(result))
    return result
