"""`agentserve bench powerloss`: its arguments and its command (the bench itself is `powerloss`)."""

from __future__ import annotations

import argparse
import json
from pathlib import Path


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--trials", type=int, default=200, help="simulated power cuts")
    parser.add_argument(
        "--target", default="kvstore", choices=["kvstore", "sessions"], help="the block store or the session database"
    )
    parser.add_argument(
        "--plant-bug",
        choices=["no-dir-fsync", "no-file-fsync"],
        help="drop every directory (or file) fsync in the writer (the recorder plants it): the check must then "
        "find losses",
    )
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", type=Path, help="also write powerloss-<target>.json and .md into this directory")
    parser.add_argument("--json", action="store_true")


def command(args: argparse.Namespace) -> dict:
    from agentserve.bench.micro import powerloss

    config = powerloss.PowerlossConfig(trials=args.trials, target=args.target, plant=args.plant_bug, seed=args.seed)
    result = powerloss.run(config)
    if args.out is not None:
        args.out.mkdir(parents=True, exist_ok=True)
        name = f"powerloss-{config.target}" + (f"-{config.plant}" if config.plant else "")
        (args.out / f"{name}.json").write_text(json.dumps(result, indent=2) + "\n")
        (args.out / f"{name}.md").write_text(powerloss.markdown(result))
    return result
