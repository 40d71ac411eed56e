"""`agentserve bench eplb`: its arguments and its command (the bench itself is `eplb`)."""

from __future__ import annotations

import argparse
import dataclasses
import json
import tempfile
from pathlib import Path
from typing import Any


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--loads",
        type=Path,
        help="an engine's --record-expert-load file to replay (default: record the trained tiny MoE on agent sessions)",
    )
    parser.add_argument("--no-recorded", action="store_true", help="replay the Zipf case only")
    parser.add_argument("--sessions", type=int, default=24, help="agent sessions the tiny MoE runs for the recording")
    parser.add_argument(
        "--window-copies", type=int, default=1024, help="routed token copies per layer in a re-planning window"
    )
    parser.add_argument("--ranks", default="32,64", help="comma-separated GPU counts")
    parser.add_argument("--redundant-per-rank", type=int, default=1, help="EPLB's spare expert slots per GPU")
    parser.add_argument("--zipf-exponent", type=float, default=1.0)
    parser.add_argument("--zipf-windows", type=int, default=12)
    parser.add_argument("--decode-batch", type=int, default=128, help="sequences per GPU in a decode step")
    parser.add_argument("--steps-per-window", type=int, default=8, help="decode steps replayed per window")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument(
        "--no-emulated", dest="emulated", action="store_false", help="skip the emulated decode engines' TPOT"
    )
    parser.add_argument(
        "--time-dilation", type=float, default=1.0, help="the emulated decode engines' local seconds per target second"
    )
    parser.add_argument(
        "--placement-ranks",
        type=int,
        default=4,
        help="with --out: also write the recorded model's EPLB placement over this many ranks (expert-placement.json)",
    )
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
        window_copies=args.window_copies,
        ranks=ranks,
        redundant_per_rank=args.redundant_per_rank,
        zipf_exponent=args.zipf_exponent,
        zipf_windows=args.zipf_windows,
        decode_batch=args.decode_batch,
        steps_per_window=args.steps_per_window,
        seed=args.seed,
        emulated_vocabulary=_vocabulary() if args.emulated else None,
        time_dilation=args.time_dilation,
    )
    recording = None
    with tempfile.TemporaryDirectory() as tmp:
        if args.loads is None and not args.no_recorded:
            recording = _record_tiny_moe(Path(tmp), args.out, args.sessions)
            config = dataclasses.replace(config, recorded=recording["file"])
        result = eplb.run(config)
    if recording is not None:
        result["regime"]["recording"] = {k: str(v) if isinstance(v, Path) else v for k, v in recording.items()}
    if args.out is not None:
        args.out.mkdir(parents=True, exist_ok=True)
        if config.recorded is not None and Path(config.recorded).is_file():
            result["regime"]["placement"] = _write_placement(Path(config.recorded), args)
        (args.out / "eplb.json").write_text(json.dumps(result, indent=2) + "\n")
        (args.out / "eplb.md").write_text(eplb.markdown(result))
    return result


def _write_placement(recording: Path, args: argparse.Namespace) -> dict[str, Any]:
    """The recorded model's placement, for its engines' `--expert-placement` (`eplb_loads.serve_placement`)."""
    from agentserve.bench.micro.eplb_loads import Recording, serve_placement

    placement = serve_placement(Recording.read(recording), args.placement_ranks, args.redundant_per_rank)
    path = args.out / "expert-placement.json"
    placement.write(path)
    return {"file": str(path), "ranks": placement.ranks, "slots_per_rank": placement.slots_per_rank}


def _vocabulary() -> Path:
    """The default model's folder: its tokenizer's vocabulary is the emulated engines' token ids."""
    from agentserve.engine.default_model import ensure_default_model

    return ensure_default_model()


def _record_tiny_moe(tmp: Path, out: Path | None, sessions: int) -> dict[str, Any]:
    """The trained tiny MoE's expert loads on agent sessions (`eplb_record`), in `out` if given."""
    from agentserve.bench.micro.eplb_record import record_agent_loads
    from agentserve.engine.model_init import init_model

    model_dir = init_model(tmp / "tiny-mixtral", "tiny", model_type="mixtral")
    if out is not None:
        out.mkdir(parents=True, exist_ok=True)
    path = (out or tmp) / "expert-loads.jsonl"
    summary = record_agent_loads(model_dir, path, max_sessions=sessions)
    return {"model": "tiny mixtral (trained)", "file": path, **summary}
