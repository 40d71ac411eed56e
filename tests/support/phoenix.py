"""A small client for the tracing UI (Arize Phoenix) that container tests assert against.

REST `GET /v1/projects/{name}/spans` answers `{"data": [span, ...], "next_cursor": str | null}`,
newest first, at most 1000 per page, filterable by `name` and `trace_id` (repeatable). A span is
`{"id", "name", "context": {"trace_id", "span_id"}, "parent_id", "span_kind", "start_time",
"end_time", "status_code", "status_message", "attributes": {"kv.bytes": ..., ...}, "events"}`.
A project exists only after its first span arrives: until then the endpoint answers 404, which
reads here as "no spans yet". The trace page (`/projects/<global id>/traces/<trace id>`) needs the
project's Relay global id, which GraphQL gives.
"""

from __future__ import annotations

import json
import time
import urllib.error
import urllib.parse
import urllib.request
from typing import Any

PROJECT = "agentserve"
PAGE_LIMIT = 1000

Span = dict[str, Any]


class PhoenixClient:
    def __init__(self, base_url: str, project: str = PROJECT, timeout_s: float = 10.0):
        self.base_url = base_url.rstrip("/")
        self.project = project
        self.timeout_s = timeout_s

    def healthy(self) -> bool:
        try:
            with urllib.request.urlopen(f"{self.base_url}/healthz", timeout=2) as response:
                return response.status == 200
        except (urllib.error.URLError, OSError):
            return False

    def spans(self, name: str | None = None, trace_id: str | None = None) -> list[Span]:
        """Every span of the project (all pages), optionally only those named `name` / in `trace_id`."""
        query: list[tuple[str, str]] = [("limit", str(PAGE_LIMIT))]
        if name:
            query.append(("name", name))
        if trace_id:
            query.append(("trace_id", trace_id))
        project = urllib.parse.quote(self.project, safe="")
        spans: list[Span] = []
        cursor: str | None = None
        while True:
            page_query = query + ([("cursor", cursor)] if cursor else [])
            try:
                page = self._request(f"/v1/projects/{project}/spans?{urllib.parse.urlencode(page_query)}")
            except urllib.error.HTTPError as exc:
                if exc.code == 404:  # the project appears with its first span
                    return []
                raise
            spans.extend(page["data"])
            cursor = page.get("next_cursor")
            if not cursor:
                return spans

    def wait_for_spans(
        self, name: str, count: int = 1, trace_id: str | None = None, timeout_s: float = 60.0, poll_s: float = 1.0
    ) -> list[Span]:
        """Block until at least `count` spans named `name` (in `trace_id`, if given) exist; return them.

        Spans reach Phoenix through each service's batch exporter (~5 s delay by default).
        """
        deadline = time.monotonic() + timeout_s
        while True:
            found = self.spans(name=name, trace_id=trace_id)
            if len(found) >= count:
                return found
            if time.monotonic() >= deadline:
                where = f" in trace {trace_id}" if trace_id else ""
                raise TimeoutError(
                    f"{len(found)} of {count} '{name}' spans{where} in project {self.project!r} after {timeout_s}s"
                )
            time.sleep(poll_s)

    def project_global_id(self) -> str:
        """The project's GraphQL (Relay) id, as the UI's URLs use it."""
        data = self._graphql("{ projects { edges { node { id name } } } }")
        for edge in data["projects"]["edges"]:
            if edge["node"]["name"] == self.project:
                return edge["node"]["id"]
        raise LookupError(f"no project {self.project!r} in Phoenix yet")

    def trace_count(self) -> int:
        data = self._graphql("{ projects { edges { node { name traceCount } } } }")
        for edge in data["projects"]["edges"]:
            if edge["node"]["name"] == self.project:
                return int(edge["node"]["traceCount"])
        return 0

    def trace_url(self, trace_id: str, span: Span | None = None) -> str:
        """The UI page showing one trace, with `span` (one of this client's span dicts) selected."""
        url = f"{self.base_url}/projects/{self.project_global_id()}/traces/{trace_id}"
        if span is not None:  # the REST `id` is the span's GraphQL node id, which the page selects by
            url += "?" + urllib.parse.urlencode({"selectedSpanNodeId": span["id"]})
        return url

    def _graphql(self, query: str) -> dict[str, Any]:
        body = json.dumps({"query": query}).encode()
        reply = self._request("/graphql", body)
        if reply.get("errors"):
            raise RuntimeError(f"Phoenix GraphQL errors: {reply['errors']}")
        return reply["data"]

    def _request(self, path: str, body: bytes | None = None) -> dict[str, Any]:
        request = urllib.request.Request(
            self.base_url + path, data=body, headers={"Content-Type": "application/json"} if body else {}
        )
        with urllib.request.urlopen(request, timeout=self.timeout_s) as response:
            return json.loads(response.read())
