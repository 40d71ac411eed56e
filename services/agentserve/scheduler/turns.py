"""TurnRunner: one turn of a session, from the new message to the last streamed token.

1. Build the prompt: the committed history plus this turn's tokens (`PromptBuilder`).
2. Ask the KV store how many leading blocks of it are stored, and, when they are all of the
   history's full blocks, whether the history's partial last block is stored too (`tail_blocks`).
3. Place the turn (`GlobalScheduler`): the prefill engine, the decode engine (the session's KV
   holder if alive, else the router's choice), and the path store hits take to the prefill engine
   (A over its own storage NIC, B relayed by a decode engine, or split over both). Prefill on one
   engine, which hands the decode engine the KV it lacks and returns the first token; then stream
   the rest from that decode engine.
   A turn that marks shared blocks (`TurnSegments`, an all-gather round) joins its round's group
   first (`RoundGroups`): the round's turns reach one prefill engine together, which computes
   each shared block once for all of them.
4. Commit prompt + output to the session only when the turn completes, so a failed turn leaves the
   history as it was and the client's retry starts clean. With state shared by several schedulers
   the commit is first a compare-and-swap of the session's record (`commits`): a turn another
   scheduler's commit overtook is refused, never appended twice.

An engine that fails (unreachable, died mid-call) is dropped from the registry. While the client has
received nothing that depends on it, the step moves to another engine: a prefill is simply re-run,
and a decode stream that failed before its first token is re-run as the same request (same tokens,
same sampling and seed, so the same result). After the decode streamed tokens the turn fails with
RetryableError instead: the client has text no other engine would continue identically.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncGenerator, Sequence
from contextlib import aclosing
from functools import partial
from typing import Any

from opentelemetry import trace

from agentserve.common.errors import NotFoundError, RetryableError
from agentserve.common.telemetry import outgoing_metadata
from agentserve.contracts import (
    EngineUnavailable,
    PrefillResult,
    SamplingParams,
    TokenLogprob,
    TurnEvent,
    TurnMeta,
)
from agentserve.contracts.turn_segments import TurnSegments
from agentserve.scheduler.kv_ledger import KVLedger
from agentserve.scheduler.placement import Placement
from agentserve.scheduler.prompts import PromptBuilder, check_fits
from agentserve.scheduler.registry import Engine, Role
from agentserve.scheduler.rounds import RoundKey
from agentserve.scheduler.running_turn import RunningTurn
from agentserve.scheduler.segments import segment_prompt
from agentserve.scheduler.sessions import Session
from agentserve.scheduler.stop_scanner import Scanned, StopScanner
from agentserve.scheduler.turn_kv import TurnKV
from agentserve.scheduler.turn_ports import EnginePorts, KVPorts, TurnCommits, TurnPolicy
from agentserve.scheduler.turn_requests import generate_request, prefill_request
from agentserve.scheduler.turn_telemetry import TurnTelemetry, phase


class TurnRunner:
    def __init__(
        self,
        prompts: PromptBuilder,
        engines: EnginePorts,
        kv: KVPorts,
        policy: TurnPolicy | None = None,
        model_name: str = "",
        commits: TurnCommits | None = None,
    ) -> None:
        """`engines`: where turns run; `kv`: the store and the optional KV capabilities
        (`turn_ports`); `policy`: retries, priorities and turn order (by default one retry, the
        caller's priority, arrival order); `model_name`: the served model's name in turn spans;
        `commits`: the shared state a turn commits to first (None: the session alone)."""
        self.prompts = prompts
        self.registry = engines.registry
        self.engines = engines.calls
        self.placer = engines.placer
        self.rounds = engines.rounds
        self.kv = TurnKV(kv, engines.registry)
        self.tail_blocks = kv.tail_blocks
        self.keeps_kv = kv.drops is None  # the decode engine keeps the session's KV between turns
        self.policy = policy or TurnPolicy()
        self.telemetry = TurnTelemetry(prompts.tokenizer, model_name)
        self.commits = commits

    def check(self, message: str | None, token_ids: Sequence[int] | None, role: str) -> None:
        """The request checks that need no history; `run` repeats them, callers may run them early."""
        limits = self.registry.limits()
        vocab_size = limits[0] if limits else self.prompts.tokenizer.vocab_size
        self.prompts.check(message, token_ids, role, vocab_size)

    async def run(
        self,
        session: Session,
        *,
        sampling: SamplingParams,
        message: str | None = None,
        token_ids: Sequence[int] | None = None,
        role: str = "user",
        segments: TurnSegments | None = None,
        client_state: dict[str, Any] | None = None,
    ) -> AsyncGenerator[TurnEvent, None]:
        """Run one turn after the session's earlier ones; the first event carries the metadata.
        `segments` marks shared blocks among the turn's new tokens; `client_state` is committed
        with the turn (`Session.commit`). Raises ValueError for a bad request and RetryableError
        when no engine could serve it."""
        started, turn, failure = time.perf_counter(), None, None
        try:
            self.check(message, token_ids, role)
            await session.lock.acquire()
            phase("session_wait", session.turns, started)
            try:
                turn = await self._start(session, sampling, message, token_ids, role, segments)
                turn.client_state = client_state
                async with aclosing(self._traced(turn)) as events:
                    async for event in events:
                        if event.metadata is not None:
                            self.telemetry.first_event(turn, started)
                        if turn.committed:
                            # The next turn may start now, even if our caller never closes this
                            # generator after the final event.
                            session.lock.release()
                        yield event
            finally:
                if turn is None or not turn.committed:
                    session.lock.release()
        except BaseException as exc:
            failure = exc
            raise
        finally:
            # A caller may stop reading at the final event and close this generator later: the turn
            # still succeeded.
            self.telemetry.outcome(turn is not None and turn.committed, failure)

    async def _start(
        self,
        session: Session,
        sampling: SamplingParams,
        message: str | None,
        token_ids: Sequence[int] | None,
        role: str,
        segments: TurnSegments | None = None,
    ) -> RunningTurn:
        """The turn's prompt, checked against the engines' context, and its span. Under the lock."""
        if session.closed:
            raise NotFoundError(f"session {session.session_id!r} was closed")
        if self.prompts.offloaded(message):
            new = await asyncio.to_thread(self.prompts.new_tokens, session, message, token_ids, role)
        else:
            new = self.prompts.new_tokens(session, message, token_ids, role)
        prompt = session.history + new
        limits = self.registry.limits()
        if limits is None:
            raise RetryableError("no engine is registered with the scheduler")
        check_fits(len(prompt), sampling.max_tokens, limits[1])
        segmented = None
        if segments is not None:
            segmented = segment_prompt(prompt, len(session.history), segments, self.prompts.tokenizer.encode)
        span = self.telemetry.spans.start(session, len(prompt), sampling, role, message, token_ids)
        return RunningTurn(session, prompt, sampling, session.turns, self.policy.retries, span, segments=segmented)

    async def _traced(self, turn: RunningTurn) -> AsyncGenerator[TurnEvent, None]:
        try:
            # Nested generators are closed explicitly, so an abandoned turn releases its engine
            # call at once rather than whenever the garbage collector finalizes them.
            async with aclosing(self._execute(turn)) as events:
                async for event in events:
                    yield event
        except Exception as exc:
            self.telemetry.failed(turn.span, exc)
            raise
        finally:
            self.telemetry.end(turn)

    async def _execute(self, turn: RunningTurn) -> AsyncGenerator[TurnEvent, None]:
        try:
            async with aclosing(self._steps(turn)) as events:
                async for event in events:
                    yield event
        finally:
            self.kv.unclaim(turn)

    async def _steps(self, turn: RunningTurn) -> AsyncGenerator[TurnEvent, None]:
        mark = time.perf_counter()
        hits = await self.kv.store_hits(turn)
        mark = phase("lookup", turn.index, mark)
        placed, response = await self._prefill(turn, hits)
        # The decode engine holds the turn's KV from the handoff on: a drain waits for the turn's end.
        with self.registry.hold(placed.decode):
            mark = phase("prefill", turn.index, mark)
            meta = self.telemetry.prefilled(turn, placed, response, hits)
            first = response.first_token
            turn.output.append(first)
            stops = StopScanner(self.prompts.tokenizer, turn.sampling)
            finished = response.finished or turn.sampling.max_tokens == 1
            scanned = stops.scan([first], finished, response.finish_reason)
            logprobs = [response.first_logprob] if response.first_logprob is not None else []
            if scanned.reason is not None:
                yield await self._finish(turn, scanned, meta, logprobs)
                return
            yield TurnEvent(token_ids=[first], text=scanned.text, metadata=meta, logprobs=logprobs)
            mark = time.perf_counter()  # the caller's time with the first token is not the decode's
            async with aclosing(self._decode(turn, placed.decode, stops)) as events:
                async for event in events:
                    if event.finished:
                        phase("decode", turn.index, mark)
                    yield event

    async def _prefill(self, turn: RunningTurn, hits: int) -> tuple[Placement, PrefillResult]:
        key = _round_key(turn)
        if key is not None:
            group = await self.rounds.join(key)
            turn.span.set_attribute("turn.round_group_size", group.members)
        while True:
            pinned = self.rounds.engine_for(key) if key is not None else None
            placed = self.placer.place(
                turn.session,
                len(turn.prompt),
                hits,
                prefill_engine=pinned,
                held=partial(self.kv.held, turn, hits),
                tail_tokens=turn.tail_tokens,
            )
            if key is not None:
                self.rounds.placed(key, placed.prefill.engine_id)
            prefill, decode = placed.prefill, placed.decode
            self.kv.claim(turn, decode.address)  # before the prefill asks the decode engine what it holds
            self.telemetry.placed(turn, placed)
            request = prefill_request(turn, placed, hits, self.policy)
            # The turn's work counts against its engines until the prefill returns: the decode engine
            # too, or a burst of new sessions all picks the same idle one (and stays on it, sticky).
            block_bytes = prefill.status.kv_block_bytes or decode.status.kv_block_bytes
            try:
                with (
                    self.registry.track(prefill),
                    self.registry.track(decode),
                    placed.reserve(self.registry, block_bytes),
                ):
                    response = await self.engines.prefill(prefill.address, request, self._metadata(turn))
                if response.handoff_failed and turn.retries_left > 0:
                    # The decode engine could not take the KV: most likely gone (its registration
                    # lags). Another one gets it; prefilling again is cheap, the KV is resident now.
                    raise EngineUnavailable(decode.address, f"KV handoff to {decode.address} failed")
                turn.decode_engine, turn.decode_address = decode.engine_id, decode.address
                turn.relay_address = placed.relay.address if placed.relay is not None else ""
                turn.context = response.context
                return placed, response
            except EngineUnavailable as exc:
                # Blame is structured: the error names the engine that failed (the decode engine when
                # it could not take the handoff), never inferred from message text.
                failed = decode if exc.address == decode.address else prefill
                self._engine_failed(failed, exc)
                self._use_retry(turn, exc)

    async def _decode(self, turn: RunningTurn, decode: Engine, stops: StopScanner) -> AsyncGenerator[TurnEvent, None]:
        request = generate_request(turn, self.policy, self.tail_blocks)
        while True:
            streamed = False
            try:
                with self.registry.track(decode):
                    async with aclosing(self.engines.generate(decode.address, request, self._metadata(turn))) as chunks:
                        async for chunk in chunks:
                            scanned = stops.scan(chunk.token_ids, chunk.finished, chunk.finish_reason)
                            logprobs = list(chunk.logprobs[: len(scanned.tokens)])
                            turn.output.extend(scanned.tokens)
                            streamed = streamed or bool(scanned.tokens)
                            if scanned.reason is not None:
                                # A stop ends the turn here; closing the stream aborts the decode.
                                yield await self._finish(turn, scanned, logprobs=logprobs)
                                return
                            if scanned.tokens:
                                yield TurnEvent(token_ids=scanned.tokens, text=scanned.text, logprobs=logprobs)
                raise EngineUnavailable(decode.address, "the stream ended before the turn finished")
            except EngineUnavailable as exc:
                self._engine_failed(decode, exc)
                if streamed:
                    raise RetryableError(f"decode engine {decode.engine_id} failed mid-turn; retry the turn") from exc
                self._use_retry(turn, exc)
                decode = self.placer.pick(Role.DECODE, turn.session)
                self.kv.claim(turn, decode.address)
                turn.decode_engine, turn.decode_address = decode.engine_id, decode.address
                turn.span.set_attribute("turn.decode_engine", decode.engine_id)

    async def _finish(
        self,
        turn: RunningTurn,
        scanned: Scanned,
        meta: TurnMeta | None = None,
        logprobs: list[TokenLogprob] | None = None,
    ) -> TurnEvent:
        """The turn's final event, after its KV is released and the turn committed."""
        await self.kv.release(turn)
        # Committed before the final event is yielded: a caller that stops reading at `finished`
        # must still find the turn in the history.
        holder = turn.decode_engine if self.keeps_kv else ""
        history = turn.prompt + turn.output
        if self.commits is not None:
            await self.commits.commit(turn.session, history, turn.client_state, KVLedger(holder, turn.context))
        turn.session.commit(history, kv_holder=holder, client_state=turn.client_state, context=turn.context)
        turn.committed = True
        self.telemetry.end(turn)
        return TurnEvent(
            token_ids=scanned.tokens,
            text=scanned.text,
            metadata=meta,
            finished=True,
            finish_reason=scanned.reason or "length",
            completion_tokens=len(turn.output),
            logprobs=logprobs or [],
        )

    def _use_retry(self, turn: RunningTurn, exc: Exception) -> None:
        if turn.retries_left <= 0:
            raise RetryableError(f"turn failed on every engine tried ({exc}); retry the turn") from exc
        turn.retries_left -= 1

    def _engine_failed(self, engine: Engine, exc: Exception) -> None:
        self.telemetry.engine_failed(engine, exc)
        self.registry.mark_dead(engine.engine_id)
        self.engines.forget(engine.address)

    def _metadata(self, turn: RunningTurn) -> list[tuple[str, str]]:
        # The turn span is made current only while the trace context is injected: a span kept
        # current across this generator's yields would leak into the caller's context.
        with trace.use_span(turn.span, end_on_exit=False):
            return outgoing_metadata()


def _round_key(turn: RunningTurn) -> RoundKey | None:
    """The group a turn joins: one that reuses shared blocks (an exact one computes them all)."""
    segmented = turn.segments
    if segmented is None or segmented.reuse.exact:
        return None
    spans = segmented.shared_spans()
    return RoundKey(turn.session.tenant, spans[0].block.round_index, segmented.reuse)
