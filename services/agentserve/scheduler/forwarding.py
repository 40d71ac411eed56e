"""SessionRouter: a request for a session goes to the scheduler that runs it (its home).

With several schedulers behind one load balancer, a session's request may reach any of them; no
client routing key is needed. The receiving scheduler `route`s it (`SessionDirectory.locate`): if
it is the home (or claims a session without one) the request runs here; otherwise it is forwarded to
the home's own client port (gRPC `Turn`/`CloseSession`, or the HTTP request as it came), with the
client's API key, and the home's answer is streamed back. A forwarded request carries
`FORWARDED` and is never forwarded again: if the home moved meanwhile it fails retryable.

A home that cannot be reached (no answer at all: it died) keeps its sessions until its lease lapses;
the router waits for that (`wait_moved`, at most two lease times) and routes again, which claims
the session here. The turn is then run only if the session's record is still at the revision the
forwarded request saw; a home that committed it before dying makes it a Conflict instead, so a turn
is never accepted twice.

The home of a request says so: gRPC initial metadata and an HTTP header `SERVED_BY`, its id.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator, Sequence

import aiohttp
import grpc
from aiohttp import web

from agentserve.common.channels import ChannelCache
from agentserve.common.errors import RetryableError
from agentserve.scheduler.control_plane import ControlPlane
from agentserve.scheduler.shared_sessions import Located
from agentserve.scheduler.shared_state import Peer
from agentserve.v1 import scheduler_pb2, scheduler_pb2_grpc

log = logging.getLogger(__name__)

FORWARDED = "x-agentserve-forwarded"  # gRPC metadata key / HTTP header: the forwarding scheduler's id
SERVED_BY = "x-agentserve-scheduler"  # gRPC initial metadata / HTTP header: the id of the scheduler that ran it
# Client metadata a forward carries on (trace context travels on its own, from the servicer's span).
FORWARDED_METADATA = ("authorization",)
# How long a forward (gRPC or HTTP) waits to connect to the home. Schedulers share a network: a
# live one accepts a connection in milliseconds, even when busy.
PEER_CONNECT_TIMEOUT_MS = 2000
# HTTP headers a proxy does not pass on (RFC 9110 7.6.1's hop-by-hop ones, and the framing).
HOP_HEADERS = frozenset(
    h.lower()
    for h in (
        "Connection",
        "Keep-Alive",
        "Proxy-Authenticate",
        "Proxy-Authorization",
        "TE",
        "Trailer",
        "Transfer-Encoding",
        "Upgrade",
        "Host",
        "Content-Length",
    )
)


class HomeUnreachable(Exception):
    """The session's home gave no answer at all: it is down (or died with the request, which the
    revision check of the retry catches)."""


class SessionRouter:
    def __init__(self, control: ControlPlane) -> None:
        self.control = control
        # To other schedulers' client ports: plain, as a client's. A home whose container is gone
        # (its address with it) is found unreachable within the connect timeout, not gRPC's 20 s.
        self.channels = ChannelCache(connect_timeout_ms=PEER_CONNECT_TIMEOUT_MS)
        self._http: aiohttp.ClientSession | None = None

    @property
    def scheduler_id(self) -> str:
        return self.control.scheduler_id

    async def route(
        self, session_id: str, owner: str, *, forwarded: bool, create: bool = False, expect_revision: int | None = None
    ) -> Located:
        """Where the owner's session runs (`SessionDirectory.locate`); a request that was forwarded
        here already is never forwarded again."""
        located = await self.control.sessions.locate(session_id, owner, create=create, expect_revision=expect_revision)
        if located.peer is not None and forwarded:
            raise RetryableError(f"session {session_id!r} moved to another scheduler; retry")
        return located

    async def after_unreachable(
        self, session_id: str, owner: str, located: Located, *, create: bool = False
    ) -> Located:
        """The home in `located` did not answer: wait for its lease to lapse, then route again (which
        claims the session here unless another scheduler did first). RetryableError if it holds on."""
        assert located.peer is not None
        peer = located.peer.scheduler_id
        wait_s = 2 * self.control.membership.lease_s
        log.warning(
            "session %s: its scheduler %s does not answer; waiting up to %.0f s for its lease", session_id, peer, wait_s
        )
        self.channels.forget(located.peer.grpc)
        if not await self.control.sessions.wait_moved(session_id, owner, located, wait_s):
            raise RetryableError(f"scheduler {peer} holds session {session_id!r} but does not answer; retry")
        return await self.route(session_id, owner, forwarded=False, create=create, expect_revision=located.revision)

    def _metadata(self, incoming: Sequence[tuple[str, str | bytes]]) -> list[tuple[str, str | bytes]]:
        return [(k, v) for k, v in incoming if k in FORWARDED_METADATA] + [(FORWARDED, self.scheduler_id)]

    async def forward_turn(
        self, peer: Peer, request: scheduler_pb2.TurnRequest, context: grpc.aio.ServicerContext
    ) -> AsyncIterator[scheduler_pb2.TurnChunk]:
        """The home's reply to `request`, chunk by chunk, its headers and its error status passed on."""
        stub = scheduler_pb2_grpc.SchedulerStub(self.channels.get(peer.grpc))
        call = stub.Turn(request, metadata=self._metadata(context.invocation_metadata() or ()))
        await self._relay_headers(call, context)
        try:
            async for chunk in call:
                yield chunk
        except grpc.aio.AioRpcError as exc:
            await _pass_on(exc, context)

    async def forward_close(
        self, peer: Peer, request: scheduler_pb2.CloseSessionRequest, context: grpc.aio.ServicerContext
    ) -> scheduler_pb2.CloseSessionResponse:
        stub = scheduler_pb2_grpc.SchedulerStub(self.channels.get(peer.grpc))
        call = stub.CloseSession(request, metadata=self._metadata(context.invocation_metadata() or ()))
        await self._relay_headers(call, context)
        try:
            return await call
        except grpc.aio.AioRpcError as exc:
            await _pass_on(exc, context)
            raise  # not reached: _pass_on aborts the call

    async def _relay_headers(self, call: grpc.aio.Call, context: grpc.aio.ServicerContext) -> None:
        """The home's initial metadata, sent on as ours; HomeUnreachable if there is none (the home
        never took the call: a scheduler sends it before doing anything)."""
        try:
            headers = await call.initial_metadata()
        except grpc.aio.AioRpcError as exc:
            raise HomeUnreachable(str(exc)) from exc
        served_by = [(k, v) for k, v in headers or () if k == SERVED_BY]
        if not served_by:
            if call.done():
                code = await call.code()
                if code is grpc.StatusCode.UNAVAILABLE:
                    raise HomeUnreachable(await call.details())
            raise HomeUnreachable("the scheduler answered without saying who it is")
        await context.send_initial_metadata(served_by)

    async def proxy_http(self, peer: Peer, request: web.Request) -> web.StreamResponse:
        """The home's answer to the HTTP `request`, streamed through as it comes."""
        if not peer.http:
            raise RetryableError(f"scheduler {peer.scheduler_id} serves no HTTP; retry")
        if self._http is None:
            connect_s = PEER_CONNECT_TIMEOUT_MS / 1000
            self._http = aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=None, sock_connect=connect_s))
        headers = {k: v for k, v in request.headers.items() if k.lower() not in HOP_HEADERS}
        headers[FORWARDED] = self.scheduler_id
        url = f"http://{peer.http}{request.rel_url}"
        try:
            upstream = await self._http.request(request.method, url, data=await request.read(), headers=headers)
        except aiohttp.ClientConnectionError as exc:
            raise HomeUnreachable(str(exc)) from exc
        try:
            response = web.StreamResponse(
                status=upstream.status,
                headers={k: v for k, v in upstream.headers.items() if k.lower() not in HOP_HEADERS},
            )
            await response.prepare(request)
            async for data in upstream.content.iter_any():
                await response.write(data)
            await response.write_eof()
            return response
        finally:
            upstream.release()

    async def close(self) -> None:
        await self.channels.close()
        if self._http is not None:
            await self._http.close()


async def _pass_on(exc: grpc.aio.AioRpcError, context: grpc.aio.ServicerContext) -> None:
    """End our call with the home's status, details and trailing metadata (a Retry-After too)."""
    trailing = exc.trailing_metadata()
    if trailing:
        context.set_trailing_metadata(tuple(trailing))
    await context.abort(exc.code(), exc.details() or "")


def forwarded(metadata: Sequence[tuple[str, str | bytes]] | None) -> bool:
    """Whether a gRPC call came from another scheduler."""
    return any(k == FORWARDED for k, _ in metadata or ())
