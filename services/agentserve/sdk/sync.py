"""The blocking SDK: `Client` -> `Session` -> `Turn`, a thin shell over the async one.

Each `Client` runs the async client on its own event loop in a daemon thread and waits for the
results, so the request logic exists once (in `aio`), and sync code may run inside a program
that has its own event loop.

    with Client("127.0.0.1:50051") as client, client.open_session(agent="coder") as session:
        for chunk in session.turn("Write a haiku"):
            print(chunk.text, end="")
        print(session.turn("Another").result().cached_tokens)
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Awaitable, Callable, Coroutine, Iterator, Mapping
from typing import Any, TypeVar

from agentserve.contracts.turn_segments import TurnSegments
from agentserve.sdk.aio import DEFAULT_MAX_TOKENS, AsyncClient, AsyncSession, AsyncTurn
from agentserve.sdk.types import SessionClosed, TurnChunk, TurnResult

T = TypeVar("T")


class _LoopThread:
    def __init__(self) -> None:
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name="agentserve-sdk", daemon=True)
        self._thread.start()

    def run(self, coro: Coroutine[Any, Any, T]) -> T:
        return asyncio.run_coroutine_threadsafe(coro, self._loop).result()

    def stop(self) -> None:
        if self._thread.is_alive():
            self._loop.call_soon_threadsafe(self._loop.stop)
            self._thread.join()
            self._loop.close()


class Turn:
    """Iterate for `TurnChunk`s, or call `result()` for the whole `TurnResult`."""

    def __init__(self, loop: _LoopThread, turn: AsyncTurn) -> None:
        self._loop = loop
        self._turn = turn

    def __iter__(self) -> Iterator[TurnChunk]:
        return self

    def __next__(self) -> TurnChunk:
        chunk = self._loop.run(self._turn.next_chunk())
        if chunk is None:
            raise StopIteration
        return chunk

    def result(self) -> TurnResult:
        return self._loop.run(self._turn.result())

    def cancel(self) -> None:
        self._loop.run(_call(self._turn.cancel))

    def __enter__(self) -> Turn:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.cancel()


class Session:
    def __init__(self, loop: _LoopThread, session: AsyncSession) -> None:
        self._loop = loop
        self._session = session

    @property
    def id(self) -> str:
        return self._session.id

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
    ) -> Turn:
        return Turn(
            self._loop,
            self._session.turn(
                message,
                token_ids=token_ids,
                role=role,
                max_tokens=max_tokens,
                temperature=temperature,
                top_p=top_p,
                seed=seed,
                ignore_eos=ignore_eos,
                segments=segments,
            ),
        )

    def call_tool(
        self, name: str, args: Mapping[str, Any] | None = None, *, predicted_s: float | None = None
    ) -> dict[str, Any]:
        return self._loop.run(self._session.call_tool(name, args, predicted_s=predicted_s))

    def fork(self, agent: str = "", system_prompt: str = "", tenant: str = "") -> Session:
        return Session(self._loop, self._loop.run(_await(self._session.fork(agent, system_prompt, tenant))))

    def close(self) -> SessionClosed:
        return self._loop.run(self._session.close())

    def __enter__(self) -> Session:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()


class Client:
    def __init__(
        self,
        address: str = "127.0.0.1:50051",
        toolproxy_url: str = "http://127.0.0.1:8080",
        *,
        timeout_s: float | None = 30.0,
        tool_timeout_s: float | None = None,
        api_key: str | None = None,
    ) -> None:
        """See `AsyncClient`: `api_key` defaults to `$AGENTSERVE_API_KEY`."""
        self._loop = _LoopThread()
        try:
            # grpc.aio channels belong to the loop they are made in: make the client on ours.
            self._async = self._loop.run(
                _call(
                    AsyncClient,
                    address,
                    toolproxy_url,
                    timeout_s=timeout_s,
                    tool_timeout_s=tool_timeout_s,
                    api_key=api_key,
                )
            )
        except BaseException:
            self._loop.stop()
            raise

    def open_session(
        self,
        tenant: str = "",
        agent: str = "",
        parent: str | Session | None = None,
        system_prompt: str = "",
        *,
        parents: tuple[str, ...] | list[str] = (),
        critical: bool = False,
        priority: int = 0,
    ) -> Session:
        """See `AsyncClient.open_session`."""
        parent_id = parent.id if isinstance(parent, Session) else parent
        opening = self._async.open_session(
            tenant=tenant,
            agent=agent,
            parent=parent_id,
            system_prompt=system_prompt,
            parents=parents,
            critical=critical,
            priority=priority,
        )
        return Session(self._loop, self._loop.run(_await(opening)))

    def session(self, session_id: str) -> Session:
        """An existing session by its id (opened earlier, by this client or another process)."""
        return Session(self._loop, self._async.session(session_id))

    def list_models(self) -> list[str]:
        return self._loop.run(self._async.list_models())

    def close(self) -> None:
        try:
            self._loop.run(self._async.close())
        finally:
            self._loop.stop()

    def __enter__(self) -> Client:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()


async def _call(fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
    return fn(*args, **kwargs)


async def _await(awaitable: Awaitable[Any]) -> Any:
    return await awaitable
