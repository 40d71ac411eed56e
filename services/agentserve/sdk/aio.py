"""The async SDK: `AsyncClient` -> `AsyncSession` -> `AsyncTurn`.

    async with AsyncClient("127.0.0.1:50051") as client:
        async with client.open_session(agent="planner", system_prompt="...") as session:
            async for chunk in session.turn("Plan the trip", max_tokens=128):
                print(chunk.text, end="")
            result = await session.turn("Now book it")      # the whole TurnResult
            weather = await session.call_tool("search", {"q": "Lisbon weather"})

A session's history lives in the scheduler: each turn sends only its new message. Every gRPC
failure surfaces as an `agentserve.sdk.errors` exception. A server with API keys needs one:
`api_key=`, else `$AGENTSERVE_API_KEY`; it travels as `authorization: Bearer <key>` on every call.
"""

from __future__ import annotations

import os
from collections.abc import Awaitable, Callable, Coroutine, Generator, Mapping
from typing import Any

import grpc

from agentserve.common.channels import open_channel
from agentserve.contracts import AgentInfo
from agentserve.contracts.turn_segments import TurnSegments
from agentserve.convert import agent_info_to_proto, turn_segments_to_proto
from agentserve.sdk.errors import InvalidRequestError, error_from_rpc
from agentserve.sdk.tools import ToolClient
from agentserve.sdk.types import SessionClosed, TurnAccumulator, TurnChunk, TurnMetadata, TurnResult
from agentserve.v1 import common_pb2, scheduler_pb2, scheduler_pb2_grpc

DEFAULT_MAX_TOKENS = 256
API_KEY_ENV = "AGENTSERVE_API_KEY"
Metadata = tuple[tuple[str, str], ...]
TURN_ROLES = ("user", "tool")


def turn_request(  # noqa: PLR0913 - one argument per TurnRequest field
    session_id: str,
    message: str | None,
    token_ids: list[int] | None,
    role: str,
    max_tokens: int,
    temperature: float,
    top_p: float,
    seed: int | None,
    ignore_eos: bool,
    segments: TurnSegments | None = None,
) -> scheduler_pb2.TurnRequest:
    """Build a TurnRequest; shape errors are InvalidRequestError, value limits are the server's to check."""
    if (message is None) == (token_ids is None):
        raise InvalidRequestError("a turn takes exactly one of message or token_ids")
    if role not in TURN_ROLES:
        raise InvalidRequestError(f"role must be one of {TURN_ROLES}, got {role!r}")
    try:
        sampling = common_pb2.SamplingParams(
            max_tokens=max_tokens, temperature=temperature, top_p=top_p, ignore_eos=ignore_eos, seed=seed
        )
        return scheduler_pb2.TurnRequest(
            session_id=session_id,
            message=message or "",
            token_ids=token_ids or [],
            role=role,
            sampling=sampling,
            segments=None if segments is None else turn_segments_to_proto(segments),
        )
    except (TypeError, ValueError) as exc:  # protobuf's range/type checks (negative, float for int...)
        raise InvalidRequestError(f"bad turn arguments: {exc}") from None


class AsyncTurn:
    """One streamed turn. Iterate it for `TurnChunk`s, or await it (or `.result()`) for the `TurnResult`.

    Chunks already iterated still count toward the result. Leaving an `async with` block, or
    `cancel()`, stops generation early.
    """

    def __init__(
        self,
        stub: scheduler_pb2_grpc.SchedulerStub,
        request: scheduler_pb2.TurnRequest,
        on_metadata: Callable[[TurnMetadata], None] | None = None,
        metadata: Metadata = (),
    ) -> None:
        self._stub = stub
        self._metadata = metadata
        self._request = request
        self._on_metadata = on_metadata
        self._call: grpc.aio.UnaryStreamCall | None = None
        self._acc = TurnAccumulator()
        self._done = False

    def __aiter__(self) -> AsyncTurn:
        return self

    async def __anext__(self) -> TurnChunk:
        chunk = await self.next_chunk()
        if chunk is None:
            raise StopAsyncIteration
        return chunk

    async def next_chunk(self) -> TurnChunk | None:
        """The next chunk, or None once the turn is over."""
        if self._done:
            return None
        if self._call is None:
            self._call = self._stub.Turn(self._request, metadata=self._metadata)
        try:
            message = await self._call.read()
        except grpc.aio.AioRpcError as exc:
            self._done = True
            raise error_from_rpc(exc) from None
        if message is grpc.aio.EOF:
            self._done = True
            return None
        chunk = TurnChunk.from_proto(message)
        self._acc.add(chunk)
        if chunk.metadata is not None and self._on_metadata is not None:
            self._on_metadata(chunk.metadata)
        return chunk

    async def result(self) -> TurnResult:
        while await self.next_chunk() is not None:
            pass
        return self._acc.result()

    def __await__(self) -> Generator[Any, None, TurnResult]:
        return self.result().__await__()

    def cancel(self) -> None:
        if self._call is not None and not self._done:
            self._call.cancel()
        self._done = True

    async def __aenter__(self) -> AsyncTurn:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        self.cancel()


class AsyncSession:
    def __init__(self, client: AsyncClient, session_id: str) -> None:
        self._client = client
        self.id = session_id
        self.closed: SessionClosed | None = None
        self.last_turn: TurnMetadata | None = None  # the latest turn that started streaming

    def turn(  # noqa: PLR0913 - the public API's keyword options, one per TurnRequest field
        self,
        message: str | None = None,
        *,
        token_ids: list[int] | None = None,
        role: str = "user",
        max_tokens: int = DEFAULT_MAX_TOKENS,
        temperature: float = 0.0,
        top_p: float = 1.0,
        seed: int | None = None,
        ignore_eos: bool = False,
        segments: TurnSegments | None = None,
    ) -> AsyncTurn:
        """Append `message` (text, or raw `token_ids`) as `role` and stream the reply (greedy by default).
        `segments` marks the shared blocks of an all-gather round in what the turn appends (each by
        content id, as tokens or as text on lines of its own), the round, and how the server may
        reuse them (`ReusePolicy`: exact, or reuse with a recompute fraction)."""
        request = turn_request(
            self.id, message, token_ids, role, max_tokens, temperature, top_p, seed, ignore_eos, segments
        )
        return AsyncTurn(self._client._stub, request, self._turn_started, self._client._metadata)

    def _turn_started(self, metadata: TurnMetadata) -> None:
        self.last_turn = metadata

    async def call_tool(
        self, name: str, args: Mapping[str, Any] | None = None, *, predicted_s: float | None = None
    ) -> dict[str, Any]:
        """Call tool `name` through the tool proxy on behalf of this session. The call's span is a
        child of the session's latest turn: the turn that asked for the tool, in an agent loop.
        `predicted_s`, the caller's estimate of the call's duration, tells the scheduler when the
        session will need its KV again (it offloads the KV meanwhile and uploads it back in time)."""
        traceparent = self.last_turn.traceparent if self.last_turn else ""
        return await self._client._tools.call(name, args, self.id, traceparent, predicted_s)

    def fork(self, agent: str = "", system_prompt: str = "", tenant: str = "") -> _OpeningSession:
        """A sub-agent session that starts from this session's history."""
        return self._client.open_session(tenant=tenant, agent=agent, parent=self.id, system_prompt=system_prompt)

    async def close(self) -> SessionClosed:
        """Close the session on the scheduler (once; later calls return the first answer)."""
        if self.closed is None:
            response = await self._client._unary(
                self._client._stub.CloseSession, scheduler_pb2.CloseSessionRequest(session_id=self.id)
            )
            self.closed = SessionClosed(response.turns, response.tokens)
        return self.closed

    async def __aenter__(self) -> AsyncSession:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.close()


class _OpeningSession(Awaitable[AsyncSession]):
    """`await client.open_session(...)` or `async with client.open_session(...) as session`."""

    def __init__(self, opening: Coroutine[Any, Any, AsyncSession]) -> None:
        self._opening = opening
        self._session: AsyncSession | None = None

    def __await__(self) -> Generator[Any, None, AsyncSession]:
        return self._opening.__await__()

    async def __aenter__(self) -> AsyncSession:
        self._session = await self._opening
        return self._session

    async def __aexit__(self, *exc_info: object) -> None:
        if self._session is not None:
            await self._session.close()


class AsyncClient:
    def __init__(
        self,
        address: str = "127.0.0.1:50051",
        toolproxy_url: str = "http://127.0.0.1:8080",
        *,
        timeout_s: float | None = 30.0,
        tool_timeout_s: float | None = None,
        api_key: str | None = None,
    ) -> None:
        """`timeout_s` bounds each non-streaming call; tool calls have no bound unless `tool_timeout_s`.
        `api_key` (default `$AGENTSERVE_API_KEY`) authenticates to a server with API keys."""
        key = api_key if api_key is not None else os.environ.get(API_KEY_ENV, "")
        self._metadata: Metadata = (("authorization", f"Bearer {key}"),) if key else ()
        self._channel = open_channel(address)
        self._stub = scheduler_pb2_grpc.SchedulerStub(self._channel)
        self._tools = ToolClient(toolproxy_url, tool_timeout_s, api_key=key)
        self._timeout_s = timeout_s

    def open_session(
        self,
        tenant: str = "",
        agent: str = "",
        parent: str | AsyncSession | None = None,
        system_prompt: str = "",
        *,
        parents: tuple[str, ...] | list[str] = (),
        critical: bool = False,
        priority: int = 0,
    ) -> _OpeningSession:
        """Open a session; `parent` (a session or its id) forks that session's history for a sub-agent.
        `parents` (agent ids this agent waits for: its job's DAG), `critical` (on the job's critical
        path) and `priority` (in [-100, 100], higher first) tell the scheduler whose KV to keep.
        ValueError, before any call, when one is out of range."""
        info = AgentInfo(agent, tuple(parents), critical, priority)
        return _OpeningSession(self._open_session(tenant, info, parent, system_prompt))

    async def _open_session(
        self, tenant: str, info: AgentInfo, parent: str | AsyncSession | None, system_prompt: str
    ) -> AsyncSession:
        parent_id = parent.id if isinstance(parent, AsyncSession) else (parent or "")
        request = scheduler_pb2.OpenSessionRequest(
            tenant=tenant, parent_session_id=parent_id, system_prompt=system_prompt
        )
        agent_info_to_proto(info, request)
        response = await self._unary(self._stub.OpenSession, request)
        return AsyncSession(self, response.session_id)

    def session(self, session_id: str) -> AsyncSession:
        """An existing session by its id (opened earlier, by this client or another process)."""
        return AsyncSession(self, session_id)

    async def list_models(self) -> list[str]:
        return list((await self._unary(self._stub.ListModels, scheduler_pb2.ListModelsRequest())).models)

    async def close(self) -> None:
        await self._tools.close()
        await self._channel.close()

    async def __aenter__(self) -> AsyncClient:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.close()

    async def _unary(self, method: Callable[..., Awaitable[Any]], request: Any) -> Any:
        try:
            return await method(request, timeout=self._timeout_s, metadata=self._metadata)
        except grpc.aio.AioRpcError as exc:
            raise error_from_rpc(exc) from None
