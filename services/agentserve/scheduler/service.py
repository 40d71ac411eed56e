"""The scheduler as a service in the shared server skeleton: gRPC API, the HTTP gateway beside it,
and the sweep that drops engines whose heartbeats stopped."""

from __future__ import annotations

import asyncio
import importlib
import logging
from collections.abc import Awaitable, Callable
from typing import Any

import grpc

from agentserve.common.grpc_auth import ApiKeyInterceptor
from agentserve.common.server import Service
from agentserve.scheduler.config import SchedulerConfig
from agentserve.scheduler.core import SchedulerCore
from agentserve.scheduler.forwarding import SessionRouter
from agentserve.scheduler.servicer import (
    CLIENT_METHODS,
    INTERNAL_SERVICE,
    SERVICE,
    SchedulerInternalServicer,
    SchedulerServicer,
)
from agentserve.v1 import scheduler_pb2_grpc

log = logging.getLogger(__name__)

# The OpenAI-compatible gateway lives in its own package; it provides `async def start_http(core:
# SchedulerCore, host: str, port: int, keys: ApiKeys, max_body_bytes: int, limits: ConnectionLimits,
# *, router: SessionRouter | None) -> aiohttp.web.AppRunner`.
HTTP_GATEWAY_MODULE = "agentserve.scheduler.http.app"
# Sessions idle past their TTL are closed by a sweep this often (a lookup also closes an expired one).
SESSION_SWEEP_S = 10.0


class SchedulerService(Service):
    def __init__(
        self,
        config: SchedulerConfig,
        core: SchedulerCore | None = None,
        sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
    ) -> None:
        """`sleep` paces the sweep (one `heartbeat_interval_ms` between sweeps); tests pass one
        that moves a fake clock."""
        self.config = config
        self._sleep = sleep
        # Loaded before the port is bound: a broken tokenizer or chat template fails the start.
        self.core = core or SchedulerCore.create(config)
        self.keys = config.keys()
        # Several schedulers over state in etcd: each session's requests go to its home scheduler.
        self.router = SessionRouter(self.core.control) if self.core.control is not None else None
        self._sweeper: asyncio.Task | None = None
        self._http: Any = None

    def add_to_server(self, server: grpc.aio.Server) -> list[str]:
        scheduler_pb2_grpc.add_SchedulerServicer_to_server(SchedulerServicer(self.core, self.keys, self.router), server)
        return [SERVICE]

    def add_internal_to_server(self, server: grpc.aio.Server) -> list[str]:
        scheduler_pb2_grpc.add_SchedulerInternalServicer_to_server(SchedulerInternalServicer(self.core), server)
        return [INTERNAL_SERVICE]

    def interceptors(self) -> list[grpc.aio.ServerInterceptor]:
        return [ApiKeyInterceptor(self.keys, CLIENT_METHODS)]

    async def start(self) -> None:
        await self.core.start()  # joins the shared state (etcd), when there is one
        self._sweeper = asyncio.create_task(self._sweep(), name="engine-sweeper")
        if self.config.http_port:
            start_http = _http_gateway()
            if start_http is None:
                log.warning("no HTTP gateway (%s) installed; serving gRPC only", HTTP_GATEWAY_MODULE)
            else:
                self._http = await start_http(
                    self.core,
                    self.config.host,
                    self.config.http_port,
                    self.keys,
                    self.config.max_body_bytes,
                    self.config.http,
                    router=self.router,
                )
        if self.keys.enabled:
            log.info("API keys on: %d tenants", len(self.keys.tenants))
        else:
            log.warning("no API keys configured: clients are not authenticated (set AGENTSERVE_API_KEYS)")

    async def stop(self) -> None:
        if self._sweeper is not None:
            self._sweeper.cancel()
            try:
                await self._sweeper
            except asyncio.CancelledError:
                pass
        if self._http is not None:
            await self._http.cleanup()
        if self.router is not None:
            await self.router.close()
        await self.core.aclose()

    async def _sweep(self) -> None:
        interval_s = self.config.heartbeat_interval_ms / 1000
        sessions_every = max(1, round(SESSION_SWEEP_S / interval_s))
        ticks = 0
        while True:
            await self._sleep(interval_s)
            self.core.expire_engines()
            ticks += 1
            if ticks % sessions_every == 0:
                self.core.expire_sessions()


def _http_gateway() -> Callable[..., Awaitable[Any]] | None:
    try:
        module = importlib.import_module(HTTP_GATEWAY_MODULE)
    except ModuleNotFoundError as exc:
        if exc.name in ("agentserve.scheduler.http", HTTP_GATEWAY_MODULE):
            return None  # not installed; a missing dependency *inside* the gateway still fails loudly
        raise
    return module.start_http
