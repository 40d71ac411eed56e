"""AsyncEngine: an LLMEngine driven by its own thread, used from asyncio services.

The engine is CPU-bound and not thread-safe, so exactly one thread touches it: the loop below runs
queued commands (imports, exports, new requests) between forward steps and publishes sampled
tokens to per-request asyncio queues. gRPC handlers never block the event loop on the model.

An emulated-compute engine's forward is a sleep (agentserve.engine.emulated_runner), during which
the thread also runs `call`/`post` commands, as a GPU's copy engines move KV while its kernels
run: a KV import, export or pin waits for the engine thread, not for the step to end. Those
commands touch only blocks no running step holds (a step's slots are taken before its forward and
held through it); adding and aborting requests, which change what a step holds, stay between steps.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import queue
import threading
import time
from collections.abc import AsyncIterator, Callable, Iterator
from dataclasses import dataclass
from typing import Any, TypeVar

from agentserve.contracts import SamplingParams, SegmentedPrompt, TokenLogprob
from agentserve.engine.emulated_runner import EmulatedRunner
from agentserve.engine.engine import LLMEngine
from agentserve.engine.runner import ExternalPrefix
from agentserve.engine.sequence import Sequence
from agentserve.engine.shared_context import PrefixKV

log = logging.getLogger(__name__)
T = TypeVar("T")


@dataclass
class TokenEvent:
    token_id: int
    finished: bool
    finish_reason: str | None
    seq: Sequence
    logprob: TokenLogprob | None = None  # the token's, when the request asked for logprobs


class AsyncEngine:
    def __init__(self, engine: LLMEngine):
        self.engine = engine
        self._commands: queue.SimpleQueue[Callable[[], None]] = queue.SimpleQueue()
        self._between_steps: queue.SimpleQueue[Callable[[], None]] = queue.SimpleQueue()  # add, abort
        self._wake = threading.Event()
        self._stopped = threading.Event()
        self._subscribers: dict[str, tuple[asyncio.AbstractEventLoop, asyncio.Queue]] = {}
        # Output tokens already streamed per request: a speculative step adds several at once.
        self._published: dict[str, int] = {}
        self._thread = threading.Thread(target=self._loop, name="engine", daemon=True)
        if isinstance(engine.runner, EmulatedRunner):
            engine.runner.sleep = self._sleep_serving_commands

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stopped.set()
        self._wake.set()
        self._thread.join(timeout=10)

    # ---- asyncio side ---------------------------------------------------------------------

    async def call(self, fn: Callable[[LLMEngine], T]) -> T:
        """Run `fn(engine)` on the engine thread between steps (or during an emulated forward: see
        the module docstring); exceptions propagate to the caller."""
        return await self._call(fn, self._commands)

    async def _call(self, fn: Callable[[LLMEngine], T], lane: queue.SimpleQueue[Callable[[], None]]) -> T:
        loop = asyncio.get_running_loop()
        future: asyncio.Future[T] = loop.create_future()

        def command() -> None:
            try:
                result = fn(self.engine)
            except BaseException as exc:  # noqa: BLE001 - handed to the awaiting caller
                loop.call_soon_threadsafe(_set_exception, future, exc)
            else:
                loop.call_soon_threadsafe(_set_result, future, result)

        self._submit(command, lane)
        return await future

    def post(self, fn: Callable[[LLMEngine], Any]) -> None:
        """Queue `fn(engine)` on the engine thread without waiting for it (errors are logged).

        Commands run in the order they were queued, so a post runs after every `call` queued before
        it; a `finally` that must release engine state can post even while being cancelled. A
        stopped engine drops it: its state no longer matters."""
        if self._stopped.is_set():
            return

        def command() -> None:
            try:
                fn(self.engine)
            except Exception:
                log.exception("posted engine command failed")

        self._submit(command)

    @contextlib.contextmanager
    def pinning(self) -> Iterator[list[int]]:
        """A list for the slots a holder pins on the engine thread (`engine.blocks.pin`); on exit,
        however it comes (cancellation included), a post frees every one of them. The post runs
        after every command queued before the exit, so pins those commands add are freed too."""
        pinned: list[int] = []
        try:
            yield pinned
        finally:
            self.post(lambda engine: engine.blocks.free(pinned))

    async def generate(  # noqa: PLR0913 - LLMEngine.add_request's options, keyword defaults
        self,
        prompt_token_ids: list[int],
        params: SamplingParams,
        tenant_salt: str = "",
        external_prefix: ExternalPrefix | None = None,
        generated: int = 0,
        priority: int = 0,
        segments: SegmentedPrompt | None = None,
        seal_tail: bool = False,
        rank: int = 0,
        segment_prefix: PrefixKV | None = None,
        exact_prefix: bool = True,
    ) -> AsyncIterator[TokenEvent]:
        """Stream each sampled token; cancelling the iteration aborts the request. `generated`,
        `priority`, `segments`, `seal_tail`, `rank`, `segment_prefix` and `exact_prefix`: see
        `LLMEngine.add_request`."""
        loop = asyncio.get_running_loop()
        events: asyncio.Queue = asyncio.Queue()

        def add(engine: LLMEngine) -> Sequence:
            seq = engine.add_request(
                prompt_token_ids,
                params,
                tenant_salt,
                external_prefix,
                generated=generated,
                segments=segments,
                priority=priority,
                seal_tail=seal_tail,
                rank=rank,
                segment_prefix=segment_prefix,
                exact_prefix=exact_prefix,
            )
            self._subscribers[seq.request_id] = (loop, events)
            return seq

        seq = await self._call(add, self._between_steps)
        finished = False
        try:
            while not finished:
                event = await events.get()
                if isinstance(event, BaseException):
                    raise event
                finished = event.finished
                yield event
        finally:
            if not finished:
                await self._call(lambda engine: self._abort(engine, seq), self._between_steps)

    def load(self) -> dict[str, int]:
        """Approximate load for heartbeats (read without the engine thread; values are ints)."""
        engine = self.engine
        return {
            "running": len(engine.running),
            "waiting": len(engine.waiting),
            "free_kv_blocks": engine.blocks.num_free_slots,
            "total_kv_blocks": engine.pool.num_slots,
        }

    # ---- engine thread --------------------------------------------------------------------

    def _submit(self, command: Callable[[], None], lane: queue.SimpleQueue | None = None) -> None:
        if self._stopped.is_set():
            raise RuntimeError("engine is stopped")
        (self._commands if lane is None else lane).put(command)
        self._wake.set()

    def serve_commands(self, seconds: float) -> None:
        """Engine thread only: while a step waits mid-forward (a layerwise prefill waiting for its
        next layer: `LayerStream.while_waiting`), wait up to `seconds` for `call`/`post` commands
        and run those queued, under the same rule as an emulated forward's sleep (module
        docstring); returns once it ran any (or was woken, `wake`), so the caller looks again."""
        try:
            command = self._commands.get(timeout=seconds)
        except queue.Empty:
            return
        command()
        _drain(self._commands)

    def wake(self) -> None:
        """Any thread: end a `serve_commands` wait now (or the next one, if none is waiting)."""
        self._commands.put(_nothing)

    def _sleep_serving_commands(self, seconds: float) -> None:
        """An emulated forward's sleep that runs `call`/`post` commands as they come."""
        deadline = time.monotonic() + seconds
        while (remaining := deadline - time.monotonic()) > 0:
            try:
                command = self._commands.get(timeout=remaining)
            except queue.Empty:
                return
            command()

    def _abort(self, engine: LLMEngine, seq: Sequence) -> None:
        self._subscribers.pop(seq.request_id, None)
        self._published.pop(seq.request_id, None)
        if not seq.finished:
            engine.abort(seq)

    def _loop(self) -> None:
        engine = self.engine
        while not self._stopped.is_set():
            for lane in (self._commands, self._between_steps):
                _drain(lane)
            if not engine.has_unfinished():
                self._wake.wait(timeout=0.5)
                self._wake.clear()
                continue
            try:
                stepped = engine.step()
            except Exception as exc:
                log.exception("engine step failed")
                self._fail_all(exc)
                continue
            for seq in stepped:
                self._publish(seq)
            if not stepped:
                # Work is waiting on KV still arriving (a layerwise prefill's layer 0): poll
                # briefly instead of spinning, waking at once for a command.
                self._wake.wait(timeout=0.002)
                self._wake.clear()

    def _publish(self, seq: Sequence) -> None:
        target = self._subscribers.get(seq.request_id)
        if target is None:
            return
        loop, events = target
        # Read here, on the engine thread: by the time the loop runs, the sequence may have grown.
        first, last = self._published.get(seq.request_id, 0), seq.num_output_tokens
        for i in range(first, last):
            logprob = seq.logprobs[i] if seq.params.logprobs is not None else None
            done = seq.finished and i == last - 1
            event = TokenEvent(
                seq.token_ids[seq.num_prompt_tokens + i], done, seq.finish_reason if done else None, seq, logprob
            )
            loop.call_soon_threadsafe(events.put_nowait, event)
        self._published[seq.request_id] = last
        if seq.finished:
            self._subscribers.pop(seq.request_id, None)
            self._published.pop(seq.request_id, None)

    def _fail_all(self, exc: Exception) -> None:
        engine = self.engine
        for seq in list(engine.running) + list(engine.waiting):
            engine.abort(seq)
            target = self._subscribers.pop(seq.request_id, None)
            if target is not None:
                target[0].call_soon_threadsafe(target[1].put_nowait, RuntimeError(f"engine step failed: {exc}"))


def _nothing() -> None:
    pass


def _drain(lane: queue.SimpleQueue[Callable[[], None]]) -> None:
    """Run the commands queued on `lane` now, without waiting for more."""
    while True:
        try:
            command = lane.get_nowait()
        except queue.Empty:
            return
        command()


def _set_result(future: asyncio.Future, result: Any) -> None:
    if not future.done():
        future.set_result(result)


def _set_exception(future: asyncio.Future, exc: BaseException) -> None:
    if not future.done():
        future.set_exception(exc)
