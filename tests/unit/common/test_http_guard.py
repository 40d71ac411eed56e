"""ConnectionGuard: which connections it closes, when, with what reply, and what it forwards, with
fake transports and a fake timer (no sockets, no waiting)."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace

import pytest

from agentserve.common.http_guard import HEADER_TIMEOUT, TOO_MANY, ConnectionGuard, ConnectionLimits

pytestmark = pytest.mark.unit


class FakeTimers:
    def __init__(self) -> None:
        self.now = 0.0
        self.pending: list[list] = []  # [due, callback, cancelled]

    def call_later(self, delay_s, callback):
        entry = [self.now + delay_s, callback, False]
        self.pending.append(entry)
        return SimpleNamespace(cancel=lambda: entry.__setitem__(2, True))

    def advance(self, seconds: float) -> None:
        self.now += seconds
        due = [e for e in self.pending if e[0] <= self.now and not e[2]]
        self.pending = [e for e in self.pending if e not in due]
        for entry in due:
            entry[1]()


class FakeTransport(asyncio.Transport):
    def __init__(self, address: str) -> None:
        super().__init__()
        self.address = address
        self.written = b""
        self.closed = False

    def get_extra_info(self, name, default=None):
        return (self.address, 40000) if name == "peername" else default

    def write(self, data) -> None:
        self.written += data

    def close(self) -> None:
        self.closed = True

    def is_closing(self) -> bool:
        return self.closed


class Inner(asyncio.Protocol):
    def __init__(self) -> None:
        self.events: list[object] = []

    def connection_made(self, transport) -> None:
        self.events.append("made")

    def data_received(self, data) -> None:
        self.events.append(data)

    def connection_lost(self, exc) -> None:
        self.events.append("lost")


def connect(guard: ConnectionGuard, address: str = "10.0.0.1"):
    inners: list[Inner] = []

    def make_inner() -> Inner:
        inners.append(Inner())
        return inners[-1]

    connection = guard.protocol_factory(make_inner)()
    transport = FakeTransport(address)
    connection.connection_made(transport)
    return connection, transport, inners


def request(body_arrived: list[bool] | None = None):
    content = SimpleNamespace(is_eof=lambda: body_arrived is None or body_arrived[0])
    return SimpleNamespace(body_exists=body_arrived is not None, content=content)


LIMITS = ConnectionLimits(header_timeout_s=2.0, body_timeout_s=5.0, max_connections_per_client=2)


def test_a_header_not_complete_within_the_timeout_is_answered_408_and_closed() -> None:
    timers = FakeTimers()
    guard = ConnectionGuard(LIMITS, timers.call_later)
    connection, transport, [inner] = connect(guard)
    connection.data_received(b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\n")
    timers.advance(1.9)
    assert not transport.closed
    timers.advance(0.1)
    assert transport.closed and transport.written == HEADER_TIMEOUT and guard.closed == {"header": 1}
    connection.connection_lost(None)
    assert inner.events == ["made", b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\n", "lost"]
    assert not guard.open_per_client


def test_a_request_that_arrives_in_time_keeps_its_connection_and_the_next_header_is_timed_again() -> None:
    timers = FakeTimers()
    guard = ConnectionGuard(LIMITS, timers.call_later)
    connection, transport, _ = connect(guard)
    timers.advance(1.0)
    connection.request_started(request())  # the header is complete: the middleware saw it
    timers.advance(100.0)  # a long generation
    connection.request_ended()
    timers.advance(100.0)  # idle keep-alive: aiohttp's own keep-alive timer governs it
    assert not transport.closed
    connection.data_received(b"GET /health HTTP/1.1\r\n")
    timers.advance(2.0)
    assert transport.closed and guard.closed == {"header": 1}


def test_a_body_still_arriving_after_the_body_timeout_is_closed_and_one_in_time_is_not() -> None:
    timers = FakeTimers()
    guard = ConnectionGuard(LIMITS, timers.call_later)
    slow, slow_transport, _ = connect(guard, "10.0.0.1")
    fast, fast_transport, _ = connect(guard, "10.0.0.2")
    slow_body, fast_body = [False], [False]
    slow.request_started(request(slow_body))
    fast.request_started(request(fast_body))
    timers.advance(4.0)
    fast_body[0] = True  # its payload reached its end: the handler goes on as long as it needs
    timers.advance(1.0)
    assert slow_transport.closed and slow_transport.written == HEADER_TIMEOUT
    assert not fast_transport.closed and guard.closed == {"body": 1}


def test_a_client_address_past_its_cap_is_answered_429_and_never_reaches_the_app() -> None:
    timers = FakeTimers()
    guard = ConnectionGuard(LIMITS, timers.call_later)
    first, _, _ = connect(guard, "10.0.0.1")
    connect(guard, "10.0.0.1")
    third, transport, inners = connect(guard, "10.0.0.1")
    assert transport.closed and transport.written == TOO_MANY and inners == []
    third.connection_lost(None)  # its loss is no one's
    assert guard.open_per_client == {"10.0.0.1": 2} and guard.closed == {"too_many": 1}
    _, other, _ = connect(guard, "10.0.0.2")  # another address has its own count
    assert not other.closed
    first.connection_lost(None)
    _, again, _ = connect(guard, "10.0.0.1")
    assert not again.closed and guard.open_per_client == {"10.0.0.1": 2, "10.0.0.2": 1}


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        (dict(header_timeout_s=0), "header_timeout_s must be a positive number of seconds, got 0"),
        (dict(body_timeout_s=float("inf")), "body_timeout_s must be a positive number of seconds, got inf"),
        (dict(max_connections_per_client=0), "max_connections_per_client must be at least 1, got 0"),
    ],
)
def test_limits_are_validated_by_name(fields, message) -> None:
    with pytest.raises(ValueError, match=message):
        ConnectionLimits(**fields)
