"""OpenTelemetry: one tracer provider per process, context carried over gRPC metadata (by the
`interceptors`), and the `kv.transfer` span every KV movement records (counted on /metrics too, by
path and link, so a test or a dashboard can tell how many transfers and bytes the spans should
account for).

Spans export over OTLP/gRPC only when `OTEL_EXPORTER_OTLP_ENDPOINT` is set; without it spans are
still created (turns report their trace id) but go nowhere. Tests attach an in-memory exporter.
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterator
from contextlib import contextmanager

from opentelemetry import propagate, trace
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor, SpanExporter
from prometheus_client import Counter

PROJECT = os.environ.get("AGENTSERVE_TRACE_PROJECT", "agentserve")
_provider: TracerProvider | None = None

KV_TRANSFERS = Counter("agentserve_kv_transfers_total", "kv.transfer spans recorded (KV movements)", ["path", "link"])
KV_TRANSFER_BYTES = Counter(
    "agentserve_kv_transfer_bytes_total", "KV bytes moved, as the kv.transfer spans say", ["path", "link"]
)


def setup_tracing(service: str, exporter: SpanExporter | None = None) -> TracerProvider:
    """Install the process-wide tracer provider (idempotent)."""
    global _provider
    if _provider is not None:
        if exporter is not None:
            _provider.add_span_processor(BatchSpanProcessor(exporter))
        return _provider
    resource = Resource.create({"service.name": service, "openinference.project.name": PROJECT})
    provider = TracerProvider(resource=resource)
    endpoint = os.environ.get("OTEL_EXPORTER_OTLP_ENDPOINT")
    if exporter is None and endpoint:
        from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter

        exporter = OTLPSpanExporter(endpoint=endpoint, insecure=True)
    if exporter is not None:
        provider.add_span_processor(BatchSpanProcessor(exporter))
    trace.set_tracer_provider(provider)
    _provider = provider
    return provider


def shutdown_tracing() -> None:
    if _provider is not None:
        _provider.force_flush()
        _provider.shutdown()


def tracer() -> trace.Tracer:
    return trace.get_tracer("agentserve")


def outgoing_metadata() -> list[tuple[str, str]]:
    """gRPC metadata carrying the current trace context (W3C traceparent).

    Channels from `channels.open_channel` carry the context current at a call by themselves; this is
    for a caller whose span cannot be current at the call (see `interceptors`).
    """
    carrier: dict[str, str] = {}
    propagate.inject(carrier)
    return list(carrier.items())


def current_trace_id() -> str:
    ctx = trace.get_current_span().get_span_context()
    return format(ctx.trace_id, "032x") if ctx.is_valid else ""


class TransferRecord:
    """Filled in by the code moving bytes; the span gets the totals when the transfer ends."""

    def __init__(self) -> None:
        self.bytes = 0
        self.blocks = 0
        self.queue_wait_s = 0.0

    def add(self, nbytes: int, blocks: int = 1) -> None:
        self.bytes += nbytes
        self.blocks += blocks


@contextmanager
def kv_transfer(
    path: str, link: str, src: str, dst: str, layers: int, configured_gbps: float = 0.0
) -> Iterator[TransferRecord]:
    """A `kv.transfer` span around one KV movement (attributes as in DESIGN.md)."""
    record = TransferRecord()
    with tracer().start_as_current_span("kv.transfer") as span:
        span.set_attribute("kv.path", path)
        span.set_attribute("net.link", link)
        span.set_attribute("net.src", src)
        span.set_attribute("net.dst", dst)
        span.set_attribute("kv.layers", layers)
        span.set_attribute("net.configured_gbps", configured_gbps)
        start = time.perf_counter()
        try:
            yield record
        finally:
            elapsed = max(time.perf_counter() - start, 1e-9)
            span.set_attribute("kv.bytes", record.bytes)
            span.set_attribute("kv.blocks", record.blocks)
            span.set_attribute("net.achieved_gbps", record.bytes * 8 / elapsed / 1e9)
            span.set_attribute("net.queue_wait_ms", record.queue_wait_s * 1000)
            KV_TRANSFERS.labels(path, link).inc()
            KV_TRANSFER_BYTES.labels(path, link).inc(record.bytes)
