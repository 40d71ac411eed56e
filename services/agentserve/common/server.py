"""The one server skeleton every agentserve service runs in.

It owns what is the same everywhere: an asyncio gRPC server on uvloop, gRPC health (NOT_SERVING
until the service's warm-up finished, e.g. an engine's first real generation), reflection,
Prometheus `/metrics`, OpenTelemetry, the `interceptors` (trace context and error mapping for every
RPC), and a graceful stop on SIGTERM/SIGINT (after the service's `drain`), or when the service
ends itself (`ended`: a drained engine). A service supplies its servicers and lifecycle hooks
by implementing `Service`; `main` is every `python -m agentserve.<service>` entry point.

A service's gRPC port is on the internal plane: with `internal_tls_dir` configured it accepts only
peers presenting a certificate of the deployment's CA (`internal_tls`). A service that also faces
clients (the scheduler) names an `internal_port`: its `grpc_port` then serves only what
`add_to_server` registers, plain (API keys authenticate clients), and the internal port serves
`add_internal_to_server`'s servicers over the internal plane. On the internal plane with mutual TLS,
each method answers only the roles its table lists (`internal_roles.py`): PERMISSION_DENIED else.
"""

from __future__ import annotations

import asyncio
import errno
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
from agentserve.common.grpc_roles import RoleInterceptor
from agentserve.common.interceptors import server_interceptors
from agentserve.common.internal_tls import InternalTLS, internal_tls
from agentserve.common.lifetime import die_with_parent
from agentserve.common.port_taken import PORT_TAKEN_EXIT, address_in_use, probe
from agentserve.common.telemetry import setup_tracing, shutdown_tracing

log = logging.getLogger(__name__)

# KV blocks travel in gRPC messages; the default 4 MB cap would reject a run of large blocks.
MAX_MESSAGE_BYTES = 256 << 20
GRPC_OPTIONS = [
    ("grpc.max_send_message_length", MAX_MESSAGE_BYTES),
    ("grpc.max_receive_message_length", MAX_MESSAGE_BYTES),
    # gRPC sets SO_REUSEPORT by default, so a second server on a port another one holds binds it
    # too and the kernel splits the connections between them: a port taken must fail the bind.
    ("grpc.so_reuseport", 0),
]


@dataclass(frozen=True)
class ServerSettings:
    name: str
    host: str
    grpc_port: int
    metrics_port: int  # 0 disables /metrics
    grace_s: float = 5.0
    tls: InternalTLS | None = None  # the internal plane's mutual TLS; None = plain
    # Nonzero: `grpc_port` faces clients and the internal plane has this port, on `internal_host`.
    internal_port: int = 0
    internal_host: str = ""

    @classmethod
    def of(cls, name: str, config: ServiceConfig) -> ServerSettings:
        """Settings from a service config; only a client-facing service's has `internal_port`/`internal_host`."""
        internal_port = getattr(config, "internal_port", 0)
        return cls(
            name,
            config.host,
            config.grpc_port,
            config.metrics_port,
            tls=internal_tls(config.internal_tls_dir),
            internal_port=internal_port,
            internal_host=(getattr(config, "internal_host", "") or config.host) if internal_port else "",
        )

    @property
    def public(self) -> bool:
        """Whether `grpc_port` faces clients (the internal plane then has its own port)."""
        return self.internal_port != 0


class ServiceConfig(Protocol):
    """The fields every service's typed (frozen) config dataclass has."""

    __dataclass_fields__: ClassVar[dict[str, Field[Any]]]  # a dataclass: `load_config` reads its fields

    @property
    def host(self) -> str: ...

    @property
    def grpc_port(self) -> int: ...

    @property
    def metrics_port(self) -> int: ...

    @property
    def internal_tls_dir(self) -> str: ...


C = TypeVar("C", bound=ServiceConfig)


class Service:
    """Hooks a service implements; every method has a harmless default."""

    def add_to_server(self, server: grpc.aio.Server) -> list[str]:
        """Register servicers; return their full service names (for health and reflection)."""
        raise NotImplementedError

    def add_internal_to_server(self, server: grpc.aio.Server) -> list[str]:
        """Register the internal plane's servicers of a client-facing service (one whose settings
        have an `internal_port`); return their full service names."""
        return []

    def interceptors(self) -> list[grpc.aio.ServerInterceptor]:
        """The service's own interceptors (API keys) on `grpc_port`, inside the shared ones: what
        they raise is mapped to a status like a servicer's error."""
        return []

    async def start(self) -> None:
        """Start background work (registration, heartbeats, HTTP listeners)."""

    async def warmup(self) -> None:
        """Prove the service works; health turns SERVING only after this returns."""

    async def drain(self) -> None:
        """On SIGTERM/SIGINT, before the server stops: finish what is in progress (an engine drains,
        `engine_service.base`). Returns at once by default."""

    async def ended(self) -> None:
        """Returns when the service ends itself (a drained engine); by default never."""
        await asyncio.Event().wait()

    async def stop(self) -> None:
        """Release resources; called once after the gRPC server stopped taking requests."""


async def serve(service: Service, settings: ServerSettings, ready: asyncio.Event | None = None) -> None:
    """Run `service` until SIGTERM/SIGINT (or cancellation), then stop gracefully."""
    setup_tracing(settings.name)
    # On a mutual-TLS port each method answers only the roles that call it (grpc_roles.py).
    roles = [RoleInterceptor()] if settings.tls is not None else []
    main_interceptors = [*server_interceptors(), *service.interceptors(), *([] if settings.public else roles)]
    server = grpc.aio.server(options=GRPC_OPTIONS, interceptors=main_interceptors)
    ports = [_Port(server, service.add_to_server(server), settings.host, settings.grpc_port, not settings.public)]
    if settings.public:
        internal = grpc.aio.server(options=GRPC_OPTIONS, interceptors=[*server_interceptors(), *roles])
        internal_names = service.add_internal_to_server(internal)
        ports.append(_Port(internal, internal_names, settings.internal_host, settings.internal_port, True))
    names = [name for port in ports for name in port.names]
    health_servicer = health.aio.HealthServicer()  # one health for both ports: the service is one
    for port in ports:
        health_pb2_grpc.add_HealthServicer_to_server(health_servicer, port.server)
        reflection.enable_server_reflection([*port.names, health.SERVICE_NAME, reflection.SERVICE_NAME], port.server)
    for name in ("", *names):
        await health_servicer.set(name, health_pb2.HealthCheckResponse.NOT_SERVING)
    for port in ports:
        port.bind(settings.name, settings.tls)
    if settings.metrics_port:
        start_http_server(settings.metrics_port, addr=settings.host)
    for port in ports:
        await port.server.start()
    for port in ports:
        log.info("%s listening on %s", settings.name, port.describe(settings.tls))

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
        await _until_stopped(service, stop)
    finally:
        await health_servicer.enter_graceful_shutdown()
        await asyncio.gather(*(port.server.stop(settings.grace_s) for port in ports))
        await service.stop()
        shutdown_tracing()
        log.info("%s stopped", settings.name)


async def _until_stopped(service: Service, stop: asyncio.Event) -> None:
    """Until a signal (`stop`: the service drains first) or the service ends itself."""
    signalled, ended = asyncio.ensure_future(stop.wait()), asyncio.ensure_future(service.ended())
    try:
        await asyncio.wait({signalled, ended}, return_when=asyncio.FIRST_COMPLETED)
    finally:
        signalled.cancel()
        ended.cancel()
    if stop.is_set():
        await service.drain()


@dataclass(frozen=True)
class _Port:
    """One listening port and the services on it: the clients' (always plain), or the internal
    plane's (mutual TLS when the service has internal credentials)."""

    server: grpc.aio.Server
    names: list[str]
    host: str
    port: int
    internal: bool

    def bind(self, service: str, tls: InternalTLS | None) -> None:
        """Listen on the port; OSError if it cannot, EADDRINUSE when another socket holds it."""
        address = f"{self.host}:{self.port}"
        try:
            if tls is None or not self.internal:
                bound = self.server.add_insecure_port(address)
            else:
                bound = self.server.add_secure_port(address, tls.server_credentials())
        except RuntimeError:  # gRPC's failed bind, which does not say why
            bound = 0
        if bound == 0:
            cause = probe(self.host, self.port)
            if cause is not None and address_in_use(cause):
                raise OSError(errno.EADDRINUSE, f"{service}: gRPC port {self.port} is taken")
            raise OSError(f"{service}: cannot bind gRPC port {self.port}")

    def describe(self, tls: InternalTLS | None) -> str:
        plane = "internal plane" if self.internal else "clients"
        security = "mutual TLS" if tls is not None and self.internal else "plain"
        return f"{self.host}:{self.port} ({plane}, {security})"


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
    try:
        uvloop.run(serve(service, ServerSettings.of(name, config)))
    except OSError as exc:
        if not address_in_use(exc):
            raise
        # Its gRPC, HTTP or metrics port: a launcher that picked it free starts it again elsewhere.
        logging.getLogger(name).error("%s: a port is taken (%s); exiting %d", name, exc, PORT_TAKEN_EXIT)
        sys.exit(PORT_TAKEN_EXIT)
