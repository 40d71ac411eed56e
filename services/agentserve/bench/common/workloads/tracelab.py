"""TraceLab round traces: one line per model call (round) of a coding-agent session.

A round has `prefix_tokens` (reused from the cache), `newly_append_tokens`, `output_tokens`,
`timing_events` and `tools[]` with wall latencies. Each session becomes a `Session`:

- `reuse="recorded"` (default): a turn reuses exactly the recorded prefix of the context and adds
  the recorded new tokens, so prompt lengths and reuse equal the trace's. The first round's prefix
  was cached by traffic before the recording (the agent's system prompt and tools); it becomes a
  shared prefix named after the provider, which the replayer warms before it starts timing.
- `reuse="context"`: the agent's context only grows (as agentserve's sessions keep it); a turn
  appends what the recorded prompt grew by beyond the previous prompt and output, and falls back to
  the recorded reuse where the context shrank (compaction).

Tool calls keep their recorded durations and start offsets (relative to the round's first tool
call). `think_s` is the time between the previous round's last event or tool result and this
round's first event: user think time, which the trace has and a replay must keep.
"""

from __future__ import annotations

import json
from collections import defaultdict
from datetime import datetime
from pathlib import Path

from agentserve.bench.common.workloads.model import Session, ToolCall, Turn, Workload

REUSE_MODES = ("recorded", "context")


def _ts(text: str) -> float:
    return datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp()


def _round_times(row: dict) -> tuple[float, float]:
    """(first event, last event or tool result) of a round, as epoch seconds."""
    times = [_ts(e["timestamp"]) for e in row.get("timing_events") or [] if e.get("timestamp")]
    times += [_ts(t["result_at"]) for t in row.get("tools") or [] if t.get("result_at")]
    if not times:
        raise ValueError(f"round {row.get('round_index')} of {row.get('session_id')} has no timestamps")
    first = [_ts(e["timestamp"]) for e in row.get("timing_events") or [] if e.get("timestamp")]
    return (min(first) if first else min(times)), max(times)


def _tools(row: dict) -> tuple[ToolCall, ...]:
    tools = row.get("tools") or []
    emitted = [_ts(t["emitted_at"]) for t in tools if t.get("emitted_at")]
    origin = min(emitted) if emitted else 0.0
    out = []
    for t in tools:
        start = _ts(t["emitted_at"]) - origin if t.get("emitted_at") else 0.0
        out.append(
            ToolCall(
                str(t.get("tool_name") or "tool"),
                float(t.get("tool_wall_latency_ms") or 0) / 1000.0,
                round(max(0.0, start), 3),
            )
        )
    return tuple(out)


def read_tracelab(path: Path, reuse: str = "recorded") -> Workload:
    if reuse not in REUSE_MODES:
        raise ValueError(f"reuse must be one of {REUSE_MODES}, got {reuse!r}")
    rounds: dict[str, list[dict]] = defaultdict(list)
    with Path(path).open() as f:
        for lineno, line in enumerate(f, 1):
            if line.strip():
                try:
                    row = json.loads(line)
                    rounds[str(row["session_id"])].append(row)
                    int(row["prefix_tokens"]), int(row["newly_append_tokens"]), int(row["output_tokens"])
                except (ValueError, KeyError, TypeError) as exc:
                    raise ValueError(f"{path}:{lineno}: not a TraceLab round: {exc!r}") from None
    prefixes: dict[str, int] = {}
    sessions = []
    for n, rows in enumerate(rounds.values()):
        rows.sort(key=lambda r: int(r["round_index"]))
        provider = str(rows[0].get("provider") or "agent")
        turns, prefix = _turns(rows, reuse)
        prefix_id = None
        if prefix:
            prefix_id = f"{provider}-system"
            prefixes[prefix_id] = max(prefixes.get(prefix_id, 0), prefix)
        # Recordings of unrelated sessions, hours apart: they start together in the replay.
        sessions.append(
            Session(f"tl-{n:03d}", tuple(turns), arrival_s=0.0, agent=provider, tenant="tracelab", prefix=prefix_id)
        )
    return Workload(
        name=Path(path).stem, sessions=tuple(sessions), source=f"tracelab:{Path(path).name}", prefixes=prefixes
    )


def _turns(rows: list[dict], reuse: str) -> tuple[list[Turn], int]:
    turns: list[Turn] = []
    context = int(rows[0]["prefix_tokens"])  # the shared prefix before the first round
    previous_end: float | None = None
    for row in rows:
        start, end = _round_times(row)
        recorded_reuse, new = int(row["prefix_tokens"]), int(row["newly_append_tokens"])
        prompt = recorded_reuse + new
        if reuse == "context" and turns and prompt > context:
            kept, new = None, prompt - context
        else:
            kept = min(recorded_reuse, context)
            new = prompt - kept
        output = max(1, int(row["output_tokens"]))
        think = 0.0 if previous_end is None else round(max(0.0, start - previous_end), 3)
        turns.append(
            Turn(output_tokens=output, new_tokens=max(1, new), reuse_tokens=kept, tools=_tools(row), think_s=think)
        )
        context = prompt + output
        previous_end = end
    return turns, int(rows[0]["prefix_tokens"])
