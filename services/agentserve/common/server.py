"""The one server skeleton every agentserve service runs in.

It owns what is the same everywhere: an asyncio gRPC server on uvloop, gRPC health (NOT_SERVING
until the service's warm-up finished, e.g. an engine's first real generation), reflection,
Prometheus `/metrics`, OpenTelemetry, the `interceptors` (trace context and error mapping for every
RPC), and a graceful stop on SIGTERM/SIGINT. A service supplies its servicers and lifecycle hooks
by implementing `Service`; `main` is every `python -m agentserve.<service>` entry point.
"""

from __future__ import annotations

import asyncio
import logging
import signal
import sys
from collections.abc import Callable, Sequence
from dataclasses import Field, dataclass
from typing import Any, ClassVar, Protocol, TypeVar

import grpc
from grpc_health.v1 import health, health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha import reflection
from prometheus_client import start_http_server

from agentserve.common.config import load_config
from agentserve.common.interceptors import server_interceptors
from agentserve.common.lifetime import die_with_parent
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

    @classmethod
    def of(cls, name: str, config: ServiceConfig) -> ServerSettings:
        return cls(name, config.host, config.grpc_port, config.metrics_port)


class ServiceConfig(Protocol):
    """The fields every service's typed (frozen) config dataclass has."""

    __dataclass_fields__: ClassVar[dict[str, Field[Any]]]  # a dataclass: `load_config` reads its fields

    @property
    def host(self) -> str: ...

    @property
    def grpc_port(self) -> int: ...

    @property
    def metrics_port(self) -> int: ...


C = TypeVar("C", bound=ServiceConfig)


class Service:
    """Hooks a service implements; every method has a harmless default."""

    def add_to_server(self, server: grpc.aio.Server) -> list[str]:
        """Register servicers; return their full service names (for health and reflection)."""
        raise NotImplementedError

    def interceptors(self) -> list[grpc.aio.ServerInterceptor]:
        """The service's own interceptors (API keys), inside the shared ones: what they raise is
        mapped to a status like a servicer's error."""
        return []

    async def start(self) -> None:
        """Start background work (registration, heartbeats, HTTP listeners)."""

    async def warmup(self) -> None:
        """Prove the service works; health turns SERVING only after this returns."""

    async def stop(self) -> None:
        """Release resources; called once after the gRPC server stopped taking requests."""


async def serve(service: Service, settings: ServerSettings, ready: asyncio.Event | None = None) -> None:
    """Run `service` until SIGTERM/SIGINT (or cancellation), then stop gracefully."""
    setup_tracing(settings.name)
    server = grpc.aio.server(options=GRPC_OPTIONS, interceptors=[*server_interceptors(), *service.interceptors()])
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


def main(name: str, config_cls: type[C], build: Callable[[C], Service], argv: Sequence[str] | None = None) -> None:
    """Process entry point: the typed config from flags and env, the service, served until signalled."""
    import uvloop

    die_with_parent()  # first: a child of `up` whose parent is gone must not start at all

    try:
        config = load_config(config_cls, sys.argv[1:] if argv is None else argv)
    except ValueError as exc:
        sys.exit(f"{name}: {exc}")
    # Before the service is built: what it logs while building (a store's start-up scan) is kept.
    logging.basicConfig(level=logging.INFO, format=f"%(asctime)s {name} %(levelname)s %(message)s")
    service = build(config)
    uvloop.run(serve(service, ServerSettings.of(name, config)))
