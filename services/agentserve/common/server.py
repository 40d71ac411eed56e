"""The one server skeleton every agentserve service runs in.

It owns what is the same everywhere: an asyncio gRPC server on uvloop, gRPC health (NOT_SERVING
until the service's warm-up finished, e.g. an engine's first real generation), reflection,
Prometheus `/metrics`, OpenTelemetry, and a graceful stop on SIGTERM/SIGINT. A service supplies
its servicers and lifecycle hooks by implementing `Service`.
"""

from __future__ import annotations

import asyncio
import logging
import signal
from dataclasses import dataclass

import grpc
from grpc_health.v1 import health, health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha import reflection
from prometheus_client import start_http_server

from agentserve.common.telemetry import setup_tracing, shutdown_tracing

log = logging.getLogger(__name__)

# KV blocks travel in gRPC messages; the default 4 MB cap would reject a run of large blocks.
MAX_MESSAGE_BYTES = 256 << 20
GRPC_OPTIONS = [
    ("grpc.max_send_message_length", MAX_MESSAGE_BYTES),
    ("grpc.max_receive_message_length", MAX_MESSAGE_BYTES),
]


@dataclass(frozen=True)
class ServerSettings:
    name: str
    host: str
    grpc_port: int
    metrics_port: int  # 0 disables /metrics
    grace_s: float = 5.0


class Service:
    """Hooks a service implements; every method has a harmless default."""

    def add_to_server(self, server: grpc.aio.Server) -> list[str]:
        """Register servicers; return their full service names (for health and reflection)."""
        raise NotImplementedError

    async def start(self) -> None:
        """Start background work (registration, heartbeats, HTTP listeners)."""

    async def warmup(self) -> None:
        """Prove the service works; health turns SERVING only after this returns."""

    async def stop(self) -> None:
        """Release resources; called once after the gRPC server stopped taking requests."""


async def serve(service: Service, settings: ServerSettings, ready: asyncio.Event | None = None) -> None:
    """Run `service` until SIGTERM/SIGINT (or cancellation), then stop gracefully."""
    setup_tracing(settings.name)
    server = grpc.aio.server(options=GRPC_OPTIONS)
    names = service.add_to_server(server)
    health_servicer = health.aio.HealthServicer()
    health_pb2_grpc.add_HealthServicer_to_server(health_servicer, server)
    reflection.enable_server_reflection([*names, health.SERVICE_NAME, reflection.SERVICE_NAME], server)
    for name in ("", *names):
        await health_servicer.set(name, health_pb2.HealthCheckResponse.NOT_SERVING)
    bound = server.add_insecure_port(f"{settings.host}:{settings.grpc_port}")
    if bound == 0:
        raise OSError(f"{settings.name}: cannot bind gRPC port {settings.grpc_port}")
    if settings.metrics_port:
        start_http_server(settings.metrics_port, addr=settings.host)
    await server.start()
    log.info("%s listening on %s:%d", settings.name, settings.host, settings.grpc_port)

    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        try:
            loop.add_signal_handler(sig, stop.set)
        except (NotImplementedError, RuntimeError):  # not the main thread (tests)
            pass
    try:
        await service.start()
        await service.warmup()
        for name in ("", *names):
            await health_servicer.set(name, health_pb2.HealthCheckResponse.SERVING)
        log.info("%s SERVING", settings.name)
        if ready is not None:
            ready.set()
        await stop.wait()
    finally:
        await health_servicer.enter_graceful_shutdown()
        await server.stop(settings.grace_s)
        await service.stop()
        shutdown_tracing()
        log.info("%s stopped", settings.name)


def run(service: Service, settings: ServerSettings) -> None:
    """Process entry point: uvloop, logging, serve until signalled."""
    import uvloop

    logging.basicConfig(level=logging.INFO, format=f"%(asctime)s {settings.name} %(levelname)s %(message)s")
    uvloop.run(serve(service, settings))
