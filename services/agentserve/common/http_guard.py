"""Bounds on slow and greedy HTTP clients, for every aiohttp front (the gateway, the tool proxy).

aiohttp's server has no header or body read timeout: a connection that sends part of a request
header and then nothing holds its socket and coroutine until its keep-alive timer (75 s) and one
that trickles a body holds them for as long as it likes. `ConnectionGuard` wraps each accepted
connection's protocol:
- a request's header must be complete `header_timeout_s` after its connection opens or, on a
  kept-alive connection, after the next request's first byte arrives;
- its body must have arrived `body_timeout_s` after its header did;
- a client address holds at most `max_connections_per_client` open connections; one more is
  answered 429 and closed at once.
A connection past a timeout is answered 408 and closed. What happens between the bytes (parsing,
handlers, responses) is aiohttp's, unchanged: the guard sees the header complete when a request
reaches its middleware, the first one of the app, and the body complete when the request's
payload stream reaches its end.
"""

from __future__ import annotations

import asyncio
import logging
import math
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol, cast

from aiohttp import web

log = logging.getLogger(__name__)

HEADER_TIMEOUT = b"HTTP/1.1 408 Request Timeout\r\nConnection: close\r\nContent-Length: 0\r\n\r\n"
TOO_MANY = b"HTTP/1.1 429 Too Many Requests\r\nConnection: close\r\nRetry-After: 1\r\nContent-Length: 0\r\n\r\n"


@dataclass(frozen=True)
class ConnectionLimits:
    header_timeout_s: float = 10.0  # a request's header, from its first byte (or the connection)
    body_timeout_s: float = 30.0  # its body, from the end of its header
    max_connections_per_client: int = 256  # open at once from one client address

    def __post_init__(self) -> None:
        for name in ("header_timeout_s", "body_timeout_s"):
            value = getattr(self, name)
            if not (value > 0 and math.isfinite(value)):
                raise ValueError(f"{name} must be a positive number of seconds, got {value}")
        if self.max_connections_per_client < 1:
            raise ValueError(f"max_connections_per_client must be at least 1, got {self.max_connections_per_client}")


class Timer(Protocol):
    def cancel(self) -> None: ...


# `(delay_s, callback) -> Timer`: the running loop's call_later unless a test passes its own.
CallLater = Callable[[float, Callable[[], None]], Timer]


class ConnectionGuard:
    """The open connections of one listener, by client address. Runs on its event loop."""

    def __init__(self, limits: ConnectionLimits, call_later: CallLater | None = None) -> None:
        self.limits = limits
        self._call_later = call_later
        self.open_per_client: Counter[str] = Counter()
        self.closed: Counter[str] = Counter()  # connections the guard closed, by reason
        self._connections: dict[Any, GuardedConnection] = {}  # by transport

    def protocol_factory(self, make_inner: Callable[[], asyncio.Protocol]) -> Callable[[], GuardedConnection]:
        return lambda: GuardedConnection(self, make_inner)

    @web.middleware
    async def middleware(self, request: web.Request, handler: Any) -> web.StreamResponse:
        connection = self._connections.get(request.transport)
        if connection is None:  # served outside a guarded site (aiohttp's test client)
            return await handler(request)
        connection.request_started(request)
        try:
            return await handler(request)
        finally:
            connection.request_ended()

    def call_later(self, delay_s: float, callback: Callable[[], None]) -> Timer:
        if self._call_later is not None:
            return self._call_later(delay_s, callback)
        return asyncio.get_running_loop().call_later(delay_s, callback)

    def opened(self, client: str, connection: GuardedConnection, transport: Any) -> bool:
        """Count a new connection of `client`; False (not counted) if it is at its cap."""
        if self.open_per_client[client] >= self.limits.max_connections_per_client:
            self.closed["too_many"] += 1
            return False
        self.open_per_client[client] += 1
        self._connections[transport] = connection
        return True

    def lost(self, client: str, transport: Any) -> None:
        self._connections.pop(transport, None)
        self.open_per_client[client] -= 1
        if not self.open_per_client[client]:
            del self.open_per_client[client]


GUARD = web.AppKey("connection_guard", ConnectionGuard)


class GuardedConnection(asyncio.Protocol):
    """One accepted connection: forwards every event to aiohttp's protocol (`inner`), and closes
    the connection when a read deadline passes. Phases: header (deadline armed), request (its
    handler runs; the body deadline armed until the body is in), idle (between requests)."""

    def __init__(self, guard: ConnectionGuard, make_inner: Callable[[], asyncio.Protocol]) -> None:
        self.guard = guard
        self._make_inner = make_inner
        self.inner: asyncio.Protocol | None = None
        self.transport: asyncio.Transport | None = None
        self.client = ""
        self.phase = "header"
        self._timer: Timer | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        transport = cast(asyncio.Transport, transport)  # uvloop's is one without subclassing it
        peer = transport.get_extra_info("peername")
        self.client = str(peer[0]) if peer else ""
        if not self.guard.opened(self.client, self, transport):
            log.debug("refused a connection of %s: at its cap of open connections", self.client)
            transport.write(TOO_MANY)
            transport.close()
            return
        self.transport = transport
        self.inner = self._make_inner()
        self.inner.connection_made(transport)
        self._arm(self.guard.limits.header_timeout_s, "header")

    def connection_lost(self, exc: Exception | None) -> None:
        if self.inner is None:
            return
        self._disarm()
        self.guard.lost(self.client, self.transport)
        self.inner.connection_lost(exc)

    def data_received(self, data: bytes) -> None:
        if self.inner is None:
            return
        if self.phase == "idle":  # the next request's first byte
            self.phase = "header"
            self._arm(self.guard.limits.header_timeout_s, "header")
        self.inner.data_received(data)

    def eof_received(self) -> bool | None:
        return self.inner.eof_received() if self.inner is not None else None

    def pause_writing(self) -> None:
        if self.inner is not None:
            self.inner.pause_writing()

    def resume_writing(self) -> None:
        if self.inner is not None:
            self.inner.resume_writing()

    def request_started(self, request: web.BaseRequest) -> None:
        self._disarm()
        self.phase = "request"
        if request.body_exists and not request.content.is_eof():
            self._arm(self.guard.limits.body_timeout_s, "body", lambda: not request.content.is_eof())

    def request_ended(self) -> None:
        self._disarm()
        self.phase = "idle"

    def _arm(self, delay_s: float, reason: str, still_slow: Callable[[], bool] = lambda: True) -> None:
        self._disarm()

        def expire() -> None:
            self._timer = None
            if still_slow():
                self._expire(reason)

        self._timer = self.guard.call_later(delay_s, expire)

    def _disarm(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None

    def _expire(self, reason: str) -> None:
        if self.transport is None or self.transport.is_closing():
            return
        log.debug("closed a connection of %s: its request %s did not arrive in time", self.client, reason)
        self.guard.closed[reason] += 1
        self.transport.write(HEADER_TIMEOUT)
        self.transport.close()


class GuardedSite(web.TCPSite):
    """aiohttp's TCP site with every accepted connection behind `guard`."""

    def __init__(self, runner: web.AppRunner, host: str, port: int, guard: ConnectionGuard) -> None:
        super().__init__(runner, host, port)
        self.guard = guard

    async def start(self) -> None:
        await web.BaseSite.start(self)  # registers the site with its runner
        server = self._runner.server
        assert server is not None
        self._server = await asyncio.get_running_loop().create_server(
            self.guard.protocol_factory(server), self._host, self._port, backlog=self._backlog
        )
        self._bound_port = self._server.sockets[0].getsockname()[1] if self._server.sockets else self._port


async def serve_guarded(app: web.Application, host: str, port: int, limits: ConnectionLimits) -> web.AppRunner:
    """Serve `app` on host:port behind a `ConnectionGuard` (port 0 picks a free one: see
    `runner.addresses`); the guard is `app[GUARD]`. The caller stops it with `runner.cleanup()`."""
    guard = ConnectionGuard(limits)
    app.middlewares.insert(0, guard.middleware)
    app[GUARD] = guard
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    try:
        await GuardedSite(runner, host, port, guard).start()
    except BaseException:
        await runner.cleanup()
        raise
    return runner
