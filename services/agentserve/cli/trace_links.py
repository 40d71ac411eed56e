"""Links into the tracing UI (Arize Phoenix, images/phoenix.Dockerfile): the page of one turn's trace.

Phoenix shows a trace at `/projects/<project node id>/traces/<trace id>`, and
`?selectedSpanNodeId=<span node id>` opens one span's details (for a turn: its model, token counts,
input and output). Node ids are Phoenix's GraphQL (Relay) ids, known once the span is stored;
exporters send spans in batches (every ~5 s), so `turn_trace_link` asks for a while.
`/redirects/traces/<trace id>` resolves to the same page in the browser once the trace is stored:
the link to print while it is not (yet).
"""

from __future__ import annotations

import json
import time
import urllib.error
import urllib.parse
import urllib.request
from dataclasses import dataclass

DEFAULT_UI = "http://127.0.0.1:6006"
SPAN_QUERY = "query ($spanId: String!) { getSpanByOtelId(spanId: $spanId) { id project { id } } }"


@dataclass(frozen=True)
class TraceLink:
    url: str
    stored: bool  # the UI holds the span: the URL opens the trace page directly


def turn_trace_link(
    ui: str, trace_id: str, span_id: str, wait_s: float = 20.0, poll_s: float = 0.5, timeout_s: float = 5.0
) -> TraceLink:
    """The trace page of `trace_id` with span `span_id` (the turn) selected, once the UI holds the
    span; the redirect link if it does not within `wait_s`. Raises OSError if the UI does not answer."""
    ui = ui.rstrip("/")
    deadline = time.monotonic() + wait_s
    while True:
        span = _graphql(ui, SPAN_QUERY, {"spanId": span_id}, timeout_s).get("getSpanByOtelId")
        if span:
            query = urllib.parse.urlencode({"selectedSpanNodeId": span["id"]})
            return TraceLink(f"{ui}/projects/{span['project']['id']}/traces/{trace_id}?{query}", True)
        if time.monotonic() >= deadline:
            return TraceLink(f"{ui}/redirects/traces/{trace_id}", False)
        time.sleep(poll_s)


def _graphql(ui: str, query: str, variables: dict[str, str], timeout_s: float) -> dict:
    body = json.dumps({"query": query, "variables": variables}).encode()
    request = urllib.request.Request(f"{ui}/graphql", data=body, headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(request, timeout=timeout_s) as response:
            reply = json.loads(response.read())
    except urllib.error.HTTPError as exc:
        raise OSError(f"tracing UI at {ui} answered {exc.code} to GraphQL") from None
    except urllib.error.URLError as exc:
        raise OSError(f"tracing UI at {ui} is unreachable: {exc.reason}") from None
    if reply.get("errors"):
        raise OSError(f"tracing UI at {ui}: GraphQL errors {reply['errors']}")
    return reply["data"]
