"""The slice of a serving system the replayer drives, and its implementation over the agentserve
SDK. Unit tests put a fake behind the same two protocols."""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any, Protocol

from agentserve.sdk import AsyncClient, AsyncSession
from agentserve.sdk.errors import RetryableError
from agentserve.sdk.types import TurnChunk


class ServerBusy(Exception):
    """The server refused the request for now (HTTP 429 / RESOURCE_EXHAUSTED) and said when to
    come back: the replayer waits `retry_after_s` and sends it again, as a client should."""

    def __init__(self, message: str, retry_after_s: float) -> None:
        super().__init__(message)
        self.retry_after_s = retry_after_s


def _busy(exc: RetryableError) -> ServerBusy | None:
    return None if exc.retry_after_s is None else ServerBusy(str(exc), exc.retry_after_s)


@dataclass(frozen=True)
class Chunk:
    token_ids: tuple[int, ...]
    cached_tokens: int | None = None  # set on the chunk that carries the turn's metadata
    prompt_tokens: int | None = None
    prefill_engine: str = ""
    decode_engine: str = ""
    handoff_held_blocks: int = 0  # full prompt blocks the decode engine already held at the handoff
    loaded_blocks: int = 0  # store hits the prefill engine loaded


class ServerSession(Protocol):
    def turn(self, token_ids: list[int], max_tokens: int) -> AsyncIterator[Chunk]:
        """Append `token_ids` to the session and stream exactly `max_tokens` generated tokens.
        Raises `ServerBusy`, before any chunk, when the server refused the turn for now."""
        ...

    async def call_tool(self, name: str, args: dict[str, Any], predicted_s: float | None = None) -> dict[str, Any]:
        """`predicted_s`: the caller's estimate of the call's duration, told to the scheduler."""
        ...

    async def close(self) -> None: ...


class ServingClient(Protocol):
    async def open_session(self, tenant: str, agent: str, critical: bool = False) -> ServerSession:
        """Raises `ServerBusy` when the server refused the session with a time to retry after."""
        ...

    async def close(self) -> None: ...


class _SDKSession:
    def __init__(self, session: AsyncSession) -> None:
        self._session = session

    async def turn(self, token_ids: list[int], max_tokens: int) -> AsyncIterator[Chunk]:
        try:
            async for chunk in self._session.turn(token_ids=token_ids, max_tokens=max_tokens, ignore_eos=True):
                yield self._chunk(chunk)
        except RetryableError as exc:
            busy = _busy(exc)
            if busy is None:
                raise
            raise busy from exc

    @staticmethod
    def _chunk(chunk: TurnChunk) -> Chunk:
        m = chunk.metadata
        return Chunk(
            tuple(chunk.token_ids),
            m.cached_tokens if m else None,
            m.prompt_tokens if m else None,
            m.prefill_engine if m else "",
            m.decode_engine if m else "",
            m.handoff_held_blocks if m else 0,
            m.loaded_blocks if m else 0,
        )

    async def call_tool(self, name: str, args: dict[str, Any], predicted_s: float | None = None) -> dict[str, Any]:
        return await self._session.call_tool(name, args, predicted_s=predicted_s)

    async def close(self) -> None:
        await self._session.close()


class SDKClient:
    """agentserve over gRPC (turns) and the tool proxy's HTTP (tool calls)."""

    def __init__(self, address: str, toolproxy_url: str) -> None:
        # No deadline on tool calls: a replayed tool may legitimately take minutes.
        self._client = AsyncClient(address, toolproxy_url, timeout_s=60.0)

    async def open_session(self, tenant: str, agent: str, critical: bool = False) -> ServerSession:
        try:
            return _SDKSession(await self._client.open_session(tenant=tenant, agent=agent, critical=critical))
        except RetryableError as exc:
            busy = _busy(exc)
            if busy is None:
                raise
            raise busy from exc

    async def close(self) -> None:
        await self._client.close()
