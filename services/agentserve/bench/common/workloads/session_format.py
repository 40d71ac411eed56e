"""agentserve's own workload format: JSON lines, a header then one session per line.

    {"format": "agentserve-workload", "version": 1, "name": "...", "source": "...",
     "hash_block_tokens": 512, "prefixes": {"claude-system": 27217}}
    {"id": "planner", "agent": "planner", "arrival_s": 0.0, "prefix": "claude-system", "after": [],
     "turns": [{"new_tokens": 900, "output_tokens": 120, "reuse_tokens": null,
                "tools": [{"name": "bash", "duration_s": 1.5, "start_s": 0.0}], "think_s": 0.0,
                "after": ["worker-1#0", "worker-2#0"], "content_key": null, "label": null},
               {"hash_ids": [0, 1, 2], "input_tokens": 1200, "output_tokens": 50}]}

Lengths are tokens of the recorded workload; times are recorded seconds. Fields at their default
are left out when writing. Semantics: `agentserve.bench.common.workloads.model`.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import MISSING, fields
from pathlib import Path
from typing import Any

from agentserve.bench.common.workloads.model import Session, ToolCall, Turn, Workload

FORMAT = "agentserve-workload"
VERSION = 1


def is_session_format(first_line: str) -> bool:
    try:
        return json.loads(first_line).get("format") == FORMAT
    except (json.JSONDecodeError, AttributeError):
        return False


def _compact(obj: Any) -> dict[str, Any]:
    out = {}
    for f in fields(obj):
        value = getattr(obj, f.name)
        if f.default is not MISSING and value == f.default:
            continue
        out[f.name] = value
    return out


def session_to_json(session: Session) -> dict[str, Any]:
    record = _compact(session)
    record["id"] = session.id
    turns = []
    for t in session.turns:
        turn = _compact(t)
        turn["output_tokens"] = t.output_tokens
        if t.tools:
            turn["tools"] = [_compact(tool) | {"name": tool.name, "duration_s": tool.duration_s} for tool in t.tools]
        for key in ("hash_ids", "after"):
            if key in turn:
                turn[key] = list(turn[key])
        turns.append(turn)
    record["turns"] = turns
    if "after" in record:
        record["after"] = list(record["after"])
    return record


def write_workload(workload: Workload, path: Path) -> Path:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    header = {
        "format": FORMAT,
        "version": VERSION,
        "name": workload.name,
        "source": workload.source,
        "hash_block_tokens": workload.hash_block_tokens,
        "prefixes": dict(workload.prefixes),
    }
    with path.open("w") as f:
        f.write(json.dumps(header) + "\n")
        for session in workload.sessions:
            f.write(json.dumps(session_to_json(session), separators=(",", ":")) + "\n")
    return path


def _turn(raw: dict[str, Any]) -> Turn:
    tools = tuple(
        ToolCall(str(t["name"]), float(t["duration_s"]), float(t.get("start_s", 0.0))) for t in raw.get("tools", ())
    )
    reuse = raw.get("reuse_tokens")
    return Turn(
        output_tokens=int(raw["output_tokens"]),
        new_tokens=int(raw.get("new_tokens", 0)),
        reuse_tokens=None if reuse is None else int(reuse),
        hash_ids=tuple(int(h) for h in raw.get("hash_ids", ())),
        input_tokens=int(raw.get("input_tokens", 0)),
        content_key=raw.get("content_key"),
        tools=tools,
        think_s=float(raw.get("think_s", 0.0)),
        after=tuple(str(a) for a in raw.get("after", ())),
        label=raw.get("label"),
    )


def _lines(path: Path) -> Iterator[tuple[int, dict[str, Any]]]:
    with Path(path).open() as f:
        for lineno, line in enumerate(f, 1):
            if line.strip():
                try:
                    yield lineno, json.loads(line)
                except json.JSONDecodeError as exc:
                    raise ValueError(f"{path}:{lineno}: not JSON: {exc}") from None


def read_workload(path: Path) -> Workload:
    lines = _lines(path)
    try:
        _, header = next(lines)
    except StopIteration:
        raise ValueError(f"{path}: empty workload file") from None
    if header.get("format") != FORMAT or header.get("version") != VERSION:
        raise ValueError(f"{path}: first line must be a {FORMAT} v{VERSION} header, got {header!r:.200}")
    sessions = []
    for lineno, raw in lines:
        try:
            sessions.append(
                Session(
                    id=str(raw["id"]),
                    turns=tuple(_turn(t) for t in raw["turns"]),
                    arrival_s=float(raw.get("arrival_s", 0.0)),
                    agent=str(raw.get("agent", "")),
                    tenant=str(raw.get("tenant", "")),
                    prefix=raw.get("prefix"),
                    after=tuple(str(a) for a in raw.get("after", ())),
                )
            )
        except (KeyError, TypeError, ValueError) as exc:
            raise ValueError(f"{path}:{lineno}: bad session: {exc!r}") from None
    return Workload(
        name=str(header.get("name", Path(path).stem)),
        sessions=tuple(sessions),
        source=str(header.get("source", "")),
        hash_block_tokens=int(header.get("hash_block_tokens", 512)),
        prefixes={str(k): int(v) for k, v in (header.get("prefixes") or {}).items()},
    ).validate()
