"""`agentserve demo`: one small agent session against a running system.

Turn 1 asks for a plan, a tool call goes through the tool proxy (so the scheduler sees the tool
wait), and each later turn sends only the new message: the server keeps the history, and the
per-turn metadata shows how much of each prompt came from cache.
"""

from __future__ import annotations

import os
import sys

from agentserve.sdk import Client

MESSAGES = (
    "You are a coding agent. Plan how to find the failing test in a repository.",
    "The test runner says tests/test_cache.py::test_eviction failed. What do you check next?",
    "The eviction order was wrong. Propose a fix in one sentence.",
)


def run_demo(address: str, toolproxy_url: str, turns: int = 3, max_tokens: int = 32, out=sys.stdout) -> list[dict]:
    """Run the session; returns per-turn metadata (also printed)."""
    summary = []
    with (
        Client(address, toolproxy_url=toolproxy_url) as client,
        client.open_session(tenant="demo", agent="coder") as session,
    ):
        for i in range(turns):
            result = session.turn(MESSAGES[i % len(MESSAGES)], max_tokens=max_tokens).result()
            row = {
                "turn": i + 1,
                "prompt_tokens": result.prompt_tokens,
                "cached_tokens": result.cached_tokens,
                "completion_tokens": len(result.token_ids),
                "trace_id": result.trace_id,
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
    ui = os.environ.get("AGENTSERVE_TRACING_UI", "http://127.0.0.1:6006")
    print(f"traces: {ui} (project 'agentserve'; search the trace ids above)", file=out)
    return summary
