"""Workloads for `agentserve bench`: readers of recorded traces (Mooncake, TraceLab) and of
agentserve's own session format, a synthetic multi-agent generator, all producing one in-memory
`Workload` (sessions, turns, dependency DAG)."""

from __future__ import annotations

import json
from pathlib import Path

from agentserve.bench.common.workloads.model import Session, ToolCall, Turn, Workload

FORMATS = ("auto", "agentserve", "mooncake", "tracelab")


def detect_format(path: Path) -> str:
    with Path(path).open() as f:
        first = next((line for line in f if line.strip()), "")
    try:
        record = json.loads(first)
    except json.JSONDecodeError:
        raise ValueError(f"{path}: not a JSON-lines workload") from None
    if not isinstance(record, dict):
        raise ValueError(f"{path}: not a JSON-lines workload")
    if record.get("format") == "agentserve-workload":
        return "agentserve"
    if "hash_ids" in record:
        return "mooncake"
    if "round_index" in record and "prefix_tokens" in record:
        return "tracelab"
    raise ValueError(f"{path}: cannot tell the workload format from its first line; pass --format")


def load_workload(
    path: Path, fmt: str = "auto", *, limit: int | None = None, reuse: str = "recorded", chain: bool = True
) -> Workload:
    """Read `path` as `fmt` ("auto" sniffs the first line); `limit` caps Mooncake requests read."""
    from agentserve.bench.common.workloads.mooncake import read_mooncake
    from agentserve.bench.common.workloads.session_format import read_workload
    from agentserve.bench.common.workloads.tracelab import read_tracelab

    if fmt not in FORMATS:
        raise ValueError(f"format must be one of {FORMATS}, got {fmt!r}")
    if not Path(path).is_file():
        raise ValueError(f"workload file not found: {path}")
    if fmt == "auto":
        fmt = detect_format(path)
    if fmt == "mooncake":
        return read_mooncake(path, limit=limit, chain=chain).validate()
    if fmt == "tracelab":
        return read_tracelab(path, reuse=reuse).validate()
    return read_workload(path)


__all__ = ["FORMATS", "Session", "ToolCall", "Turn", "Workload", "detect_format", "load_workload"]
