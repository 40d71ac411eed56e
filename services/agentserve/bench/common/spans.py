"""KV bytes by path, read from the `kv.transfer` spans every KV movement records (DESIGN.md).

Two sources of the same spans:
- `OtlpSink`: a tiny OTLP/gRPC trace receiver in the bench process; a cluster the bench starts
  exports to it (`OTEL_EXPORTER_OTLP_ENDPOINT`);
- `PhoenixSpans`: the tracing UI of a deployment (compose publishes it on loopback), asked over
  its REST API for the run's time window.
"""

from __future__ import annotations

import json
import urllib.error
import urllib.parse
import urllib.request
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import grpc
from opentelemetry.proto.collector.trace.v1 import trace_service_pb2, trace_service_pb2_grpc

KV_SPAN = "kv.transfer"
KV_PATHS = ("A", "B", "handoff", "persist", "offload", "prefetch")


@dataclass(frozen=True)
class KVTransfer:
    end_unix_s: float
    path: str
    nbytes: int
    link: str = ""
    src: str = ""
    dst: str = ""


def _any_value(v: Any) -> object:
    kind = v.WhichOneof("value")
    return getattr(v, kind) if kind else None


class _Receiver(trace_service_pb2_grpc.TraceServiceServicer):
    def __init__(self, sink: OtlpSink) -> None:
        self.sink = sink

    async def Export(
        self, request: trace_service_pb2.ExportTraceServiceRequest, context: grpc.aio.ServicerContext
    ) -> trace_service_pb2.ExportTraceServiceResponse:
        for rs in request.resource_spans:
            for ss in rs.scope_spans:
                for span in ss.spans:
                    if span.name == KV_SPAN:
                        attrs = {a.key: _any_value(a.value) for a in span.attributes}
                        self.sink.transfers.append(_transfer(span.end_time_unix_nano / 1e9, attrs))
        return trace_service_pb2.ExportTraceServiceResponse()


def _transfer(end_unix_s: float, attrs: dict) -> KVTransfer:
    return KVTransfer(
        end_unix_s,
        str(attrs.get("kv.path", "")),
        int(attrs.get("kv.bytes") or 0),
        str(attrs.get("net.link", "")),
        str(attrs.get("net.src", "")),
        str(attrs.get("net.dst", "")),
    )


class OtlpSink:
    """Collects `kv.transfer` spans sent to 127.0.0.1:`port` (0 picks a free port)."""

    def __init__(self) -> None:
        self.transfers: list[KVTransfer] = []
        self._server: grpc.aio.Server | None = None
        self.port = 0

    async def start(self) -> str:
        self._server = grpc.aio.server(options=[("grpc.max_receive_message_length", 64 << 20)])
        trace_service_pb2_grpc.add_TraceServiceServicer_to_server(_Receiver(self), self._server)
        self.port = self._server.add_insecure_port("127.0.0.1:0")
        await self._server.start()
        return self.endpoint

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    async def stop(self) -> None:
        if self._server is not None:
            await self._server.stop(1)

    def between(self, start_unix_s: float, end_unix_s: float) -> list[KVTransfer]:
        return [t for t in self.transfers if start_unix_s <= t.end_unix_s <= end_unix_s]


class PhoenixSpans:
    """`kv.transfer` spans of one Phoenix project, by time window."""

    def __init__(self, base_url: str, project: str = "agentserve", timeout_s: float = 30.0) -> None:
        self.base_url = base_url.rstrip("/")
        self.project = project
        self.timeout_s = timeout_s

    def between(self, start_unix_s: float, end_unix_s: float) -> list[KVTransfer]:
        query = [
            ("limit", "1000"),
            ("name", KV_SPAN),
            ("start_time", _iso(start_unix_s)),
            ("end_time", _iso(end_unix_s)),
        ]
        project = urllib.parse.quote(self.project, safe="")
        out: list[KVTransfer] = []
        cursor = None
        while True:
            page_query = query + ([("cursor", cursor)] if cursor else [])
            url = f"{self.base_url}/v1/projects/{project}/spans?{urllib.parse.urlencode(page_query)}"
            try:
                with urllib.request.urlopen(url, timeout=self.timeout_s) as response:
                    page = json.loads(response.read())
            except urllib.error.HTTPError as exc:
                if exc.code == 404:  # the project appears with its first span
                    return out
                raise
            for span in page.get("data", []):
                if span.get("name") == KV_SPAN:
                    end = datetime.fromisoformat(span["end_time"].replace("Z", "+00:00")).timestamp()
                    out.append(_transfer(end, span.get("attributes") or {}))
            cursor = page.get("next_cursor")
            if not cursor:
                return out


def _iso(unix_s: float) -> str:
    return datetime.fromtimestamp(unix_s, tz=UTC).isoformat()
