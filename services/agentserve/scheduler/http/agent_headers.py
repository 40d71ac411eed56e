"""What an agent says of itself on the OpenAI routes, in headers (the body stays OpenAI's own):

  X-Agent-Id         the agent's id within its job
  X-Agent-Parents    comma-separated agent ids it waits for (its DAG parents)
  X-Agent-Critical   true / false: on the job's critical path
  X-Agent-Priority   an integer in [-100, 100], higher first

They describe the session they open (`X-Session-Id`); a malformed one is a 400 naming the header.
"""

from __future__ import annotations

from collections.abc import Mapping

from agentserve.contracts import AgentInfo

AGENT_HEADERS = ("X-Agent-Id", "X-Agent-Parents", "X-Agent-Critical", "X-Agent-Priority")
_TRUE, _FALSE = ("true", "1", "yes"), ("false", "0", "no")


def parse_agent_headers(headers: Mapping[str, str]) -> AgentInfo | None:
    """The agent info the headers carry, or None when there is none."""
    raw = {name: headers.get(name, "").strip() for name in AGENT_HEADERS}
    if not any(raw.values()):
        return None
    parents = tuple(p.strip() for p in raw["X-Agent-Parents"].split(",")) if raw["X-Agent-Parents"] else ()
    critical = raw["X-Agent-Critical"].lower()
    if critical not in ("", *_TRUE, *_FALSE):
        raise ValueError(f"X-Agent-Critical must be true or false, got {raw['X-Agent-Critical'][:32]!r}")
    try:
        priority = int(raw["X-Agent-Priority"] or 0)
    except ValueError:
        raise ValueError(f"X-Agent-Priority must be an integer, got {raw['X-Agent-Priority'][:32]!r}") from None
    try:
        return AgentInfo(raw["X-Agent-Id"], parents, critical in _TRUE, priority)
    except ValueError as exc:
        field = str(exc).split(" ", 1)[0].rstrip(":")
        header = {"agent": "X-Agent-Id", "parents": "X-Agent-Parents", "priority": "X-Agent-Priority"}.get(field, "")
        raise ValueError(f"{header}: {exc}" if header else str(exc)) from None
