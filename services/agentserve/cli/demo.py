"""`agentserve demo`: one small agent session against a running system.

Turn 1 asks for a plan, a tool call goes through the tool proxy (so the scheduler sees the tool
wait), and each later turn sends only the new message: the server keeps the history, and the
per-turn metadata shows how much of each prompt came from cache. The last line links to the last
turn's trace in the tracing UI (`AGENTSERVE_TRACING_UI`, default http://127.0.0.1:6006).
"""

from __future__ import annotations

import os
import sys
from typing import TextIO

from agentserve.cli.trace_links import DEFAULT_UI, turn_trace_link
from agentserve.sdk import Client, TurnResult

MESSAGES = (
    "You are a coding agent. Plan how to find the failing test in a repository.",
    "The test runner says tests/test_cache.py::test_eviction failed. What do you check next?",
    "The eviction order was wrong. Propose a fix in one sentence.",
)


def run_demo(
    address: str,
    toolproxy_url: str,
    turns: int = 3,
    max_tokens: int = 64,
    out: TextIO = sys.stdout,
    tracing_ui: str | None = None,
) -> list[dict]:
    """Run the session; returns per-turn metadata (also printed)."""
    summary = []
    last: TurnResult | None = None
    with (
        Client(address, toolproxy_url=toolproxy_url) as client,
        client.open_session(tenant="demo", agent="coder") as session,
    ):
        for i in range(turns):
            result = last = session.turn(MESSAGES[i % len(MESSAGES)], max_tokens=max_tokens).result()
            row = {
                "turn": i + 1,
                "prompt_tokens": result.prompt_tokens,
                "cached_tokens": result.cached_tokens,
                "completion_tokens": len(result.token_ids),
                "text": result.text,
                "trace_id": result.trace_id,
                "span_id": result.metadata.span_id if result.metadata else "",
            }
            summary.append(row)
            print(
                f"turn {i + 1}: prompt {row['prompt_tokens']} tokens, {row['cached_tokens']} from cache, "
                f"{row['completion_tokens']} generated, trace {row['trace_id']}",
                file=out,
            )
            print(f"  > {result.text!r}", file=out)
            if i + 1 < turns:
                tool = session.call_tool("sleep", {"seconds": 0.2})
                print(f"  tool sleep -> {tool}", file=out)
    if last is not None:
        ui = tracing_ui or os.environ.get("AGENTSERVE_TRACING_UI", DEFAULT_UI)
        print(trace_line(ui, last), file=out)
    return summary


def trace_line(ui: str, turn: TurnResult) -> str:
    """Where to see `turn` in the tracing UI: its trace page once the UI has the turn's span."""
    span_id = turn.metadata.span_id if turn.metadata else ""
    if not turn.trace_id or not span_id:
        return f"traces: {ui} (project 'agentserve')"
    try:
        link = turn_trace_link(ui, turn.trace_id, span_id)
    except OSError as exc:
        return (
            f"last turn's trace: not shown, {exc} (services export spans only when "
            "OTEL_EXPORTER_OTLP_ENDPOINT is set; `docker compose up` sets it)"
        )
    if link.stored:
        return f"last turn's trace: {link.url}"
    return f"last turn's trace (opens once the tracing UI has received it): {link.url}"
