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
   history as it was and the client's retry starts clean.

An engine that fails (unreachable, died mid-call) is dropped from the registry. While the client has
received nothing that depends on it, the step moves to another engine: a prefill is simply re-run,
and a decode stream that failed before its first token is re-run as the same request (same tokens,
same sampling and seed, so the same result). After the decode streamed tokens the turn fails with
RetryableError instead: the client has text no other engine would continue identically.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import time
import uuid
from collections.abc import AsyncGenerator, Callable, Sequence
from contextlib import aclosing
from dataclasses import dataclass, field
from functools import partial
from typing import Protocol, cast

from opentelemetry import trace
from opentelemetry.trace import Span, Status, StatusCode

from agentserve.common.errors import NotFoundError, RetryableError
from agentserve.common.telemetry import outgoing_metadata
from agentserve.contracts import (
    EngineUnavailable,
    GenerateChunk,
    GenerateRequest,
    PrefillRequest,
    PrefillResult,
    SamplingParams,
    TokenLogprob,
    TurnEvent,
    TurnMeta,
)
from agentserve.contracts.segments import SegmentedPrompt
from agentserve.contracts.turn_segments import TurnSegments
from agentserve.kv.block_hash import block_ids_for
from agentserve.scheduler import metrics
from agentserve.scheduler.decode_claims import DecodeClaims
from agentserve.scheduler.engine_clients import Metadata
from agentserve.scheduler.paths import DualPathPolicy, PathPolicy
from agentserve.scheduler.placement import GlobalScheduler, Placement
from agentserve.scheduler.prefill_policy import PrefillPolicy
from agentserve.scheduler.prompts import PromptBuilder, check_fits
from agentserve.scheduler.registry import Engine, EngineRegistry, Role
from agentserve.scheduler.relay_policy import RelayPolicy
from agentserve.scheduler.rounds import RoundGroups, RoundKey
from agentserve.scheduler.router import Router
from agentserve.scheduler.segments import segment_prompt
from agentserve.scheduler.sessions import Session
from agentserve.scheduler.tail_blocks import Tail, context_tail
from agentserve.scheduler.tracing import TurnSpans
from agentserve.scheduler.turn_order import ArrivalOrder, TurnOrder
from agentserve.scheduler.turn_text import TurnText

log = logging.getLogger(__name__)


class StoreLookup(Protocol):
    async def lookup(self, block_ids: list[bytes]) -> int:
        """How many leading ids of the chain are stored."""
        ...


class StoreDeletes(Protocol):
    async def delete(self, block_ids: list[bytes]) -> int:
        """Remove `block_ids` from the store; how many it held."""
        ...


class EngineCalls(Protocol):
    """The two engine calls a turn makes (`EngineClients`; fakes in unit tests)."""

    async def prefill(self, address: str, request: PrefillRequest, metadata: Metadata) -> PrefillResult: ...

    def generate(
        self, address: str, request: GenerateRequest, metadata: Metadata
    ) -> AsyncGenerator[GenerateChunk, None]: ...

    def forget(self, address: str) -> None: ...


class KVDrops(Protocol):
    async def drop_kv(self, address: str, block_ids: list[bytes]) -> int: ...


@dataclass
class _Turn:
    session: Session
    prompt: list[int]
    sampling: SamplingParams
    index: int
    retries_left: int
    span: Span
    turn_id: str = field(default_factory=lambda: uuid.uuid4().hex)
    output: list[int] = field(default_factory=list)
    committed: bool = False
    decode_engine: str = ""  # the decode engine the turn's KV went to (the session's next KV holder)
    segments: SegmentedPrompt | None = None  # the prompt's shared blocks (an all-gather round's turn)
    decode_address: str = ""
    prompt_blocks: list[bytes] = field(default_factory=list)  # the prompt's full blocks' ids
    claim: tuple[str, list[bytes]] | None = None  # (decode address, blocks) claimed in `DecodeClaims`
    context_tail: Tail | None = None  # the history's stored tail: loaded if `tail_tokens`, garbage after the turn
    tail_tokens: int = 0  # prompt tokens after the store hits that the prefill loads with the tail


class TurnRunner:
    def __init__(
        self,
        prompts: PromptBuilder,
        registry: EngineRegistry,
        router: Router,
        engines: EngineCalls,
        store: StoreLookup,
        retries: int = 1,
        paths: PathPolicy | None = None,
        model_name: str = "",
        prefill_policy: PrefillPolicy | None = None,
        relay_policy: RelayPolicy | None = None,
        rounds: RoundGroups | None = None,
        drops: KVDrops | None = None,
        priority_of: Callable[[Session], int] | None = None,
        tail_blocks: bool = False,
        turn_order: TurnOrder | None = None,
    ) -> None:
        """`drops`: set when sessions keep no KV on their decode engine between turns
        (`SchedulerConfig.session_kv = "store"`); each turn's decode engine then drops it at the end.
        `priority_of` gives the scheduling priority a session's requests carry to the engines
        (`agent_priority.priority_of`); by default the caller's own. `tail_blocks`: a turn's decode
        engine persists its context's partial last block, the next turn loads it (`tail_blocks`
        module), and the one before is deleted from the store (when `store` can delete).
        `turn_order` ranks a session's turn among its engine's waiting turns of equal priority
        (`turn_order` module); by default arrival order."""
        self.prompts = prompts
        self.tail_blocks = tail_blocks
        self.tail_store = cast(StoreDeletes, store) if tail_blocks and hasattr(store, "delete") else None
        self.drops = drops
        self.priority_of = priority_of or (lambda session: session.info.priority)
        self.turn_order = turn_order or ArrivalOrder()
        self.registry = registry
        self.engines = engines
        self.store = store
        self.retries = retries
        self.placer = GlobalScheduler(registry, router, prefill_policy, relay_policy, paths or DualPathPolicy())
        self.spans = TurnSpans(prompts.tokenizer, model_name)
        self.rounds = rounds or RoundGroups()
        self.claims = DecodeClaims()  # with `drops`: what turns in flight need on their decode engine

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
    ) -> AsyncGenerator[TurnEvent, None]:
        """Run one turn after the session's earlier ones; the first event carries the metadata.
        `segments` marks shared blocks among the turn's new tokens. Raises ValueError for a bad
        request and RetryableError when no engine could serve it."""
        started, turn, failure = time.perf_counter(), None, None
        try:
            self.check(message, token_ids, role)
            await session.lock.acquire()
            _phase("session_wait", session.turns, started)
            try:
                turn = await self._start(session, sampling, message, token_ids, role, segments)
                async with aclosing(self._traced(turn)) as events:
                    async for event in events:
                        if event.metadata is not None:
                            label = "first" if turn.index == 0 else "later"
                            metrics.TIME_TO_FIRST_TOKEN.labels(label).observe(time.perf_counter() - started)
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
            done = turn is not None and turn.committed
            metrics.TURNS.labels("ok" if done else metrics.outcome_of(failure)).inc()

    async def _start(
        self,
        session: Session,
        sampling: SamplingParams,
        message: str | None,
        token_ids: Sequence[int] | None,
        role: str,
        segments: TurnSegments | None = None,
    ) -> _Turn:
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
        span = self.spans.start(session, len(prompt), sampling, role, message, token_ids)
        return _Turn(session, prompt, sampling, session.turns, self.retries, span, segments=segmented)

    async def _traced(self, turn: _Turn) -> AsyncGenerator[TurnEvent, None]:
        try:
            # Nested generators are closed explicitly, so an abandoned turn releases its engine
            # call at once rather than whenever the garbage collector finalizes them.
            async with aclosing(self._execute(turn)) as events:
                async for event in events:
                    yield event
        except Exception as exc:
            turn.span.record_exception(exc)
            turn.span.set_status(Status(StatusCode.ERROR, str(exc)))
            raise
        finally:
            self.spans.end(turn.span, len(turn.prompt), turn.output)

    async def _execute(self, turn: _Turn) -> AsyncGenerator[TurnEvent, None]:
        try:
            async with aclosing(self._steps(turn)) as events:
                async for event in events:
                    yield event
        finally:
            self._unclaim(turn)

    async def _steps(self, turn: _Turn) -> AsyncGenerator[TurnEvent, None]:
        mark = time.perf_counter()
        hits = await self._store_hits(turn)
        mark = _phase("lookup", turn.index, mark)
        placed, response = await self._prefill(turn, hits)
        mark = _phase("prefill", turn.index, mark)
        prefill, decode = placed.prefill, placed.decode
        first = response.first_token
        turn.output.append(first)
        text = TurnText(self.prompts.tokenizer, turn.sampling.stop, turn.sampling.min_tokens)
        span_context = turn.span.get_span_context()
        trace_id = format(span_context.trace_id, "032x") if span_context.is_valid else ""
        span_id = format(span_context.span_id, "016x") if span_context.is_valid else ""
        path = response.kv_path
        meta = TurnMeta(
            turn.turn_id,
            turn.index,
            len(turn.prompt),
            response.cached_tokens,
            prefill.engine_id,
            decode.engine_id,
            trace_id,
            span_id=span_id,
            relay_engine=placed.relay.engine_id if placed.relay and response.relayed_blocks else "",
            kv_path=path.value,
            loaded_blocks=response.loaded_blocks,
            relayed_blocks=response.relayed_blocks,
            handoff_blocks=response.handoff_blocks,
            handoff_bytes=response.handoff_bytes,
            handoff_held_blocks=response.handoff_held_blocks,
        )
        metrics.KV_PATHS.labels(path.value).inc()
        metrics.HANDOFF_BYTES.inc(response.handoff_bytes)
        self.spans.prefilled(turn.span, response.cached_tokens)
        turn.span.set_attributes(
            {
                "turn.cached_tokens": response.cached_tokens,
                "turn.store_hit_blocks": hits,
                "turn.prefill_engine": prefill.engine_id,
                "turn.decode_engine": decode.engine_id,
                "turn.kv_path": path.value,
                "turn.relayed_blocks": response.relayed_blocks,
                "turn.handoff_bytes": response.handoff_bytes,
                "turn.handoff_held_blocks": response.handoff_held_blocks,
            }
        )
        logprobs = [response.first_logprob] if response.first_logprob is not None else []
        stopped = _stop_id_at(turn, [first], before=0) is not None
        done = response.finished or stopped or turn.sampling.max_tokens == 1
        delta = text.add([first], final=done)
        if done or text.stopped:
            reason = "stop" if stopped or text.stopped else response.finish_reason or "length"
            await self._release_kv(turn)
            yield self._finish(turn, [first], delta, reason, meta, logprobs)
            return
        yield TurnEvent(token_ids=[first], text=delta, metadata=meta, logprobs=logprobs)
        mark = time.perf_counter()  # the caller's time with the first token is not the decode's
        async with aclosing(self._decode(turn, decode, text)) as events:
            async for event in events:
                if event.finished:
                    _phase("decode", turn.index, mark)
                yield event

    async def _store_hits(self, turn: _Turn) -> int:
        block_size, fingerprint = self.registry.block_size, self.registry.fingerprint
        if block_size is None or fingerprint is None:  # no engine ever registered: nothing can be stored
            return 0
        ids = block_ids_for(turn.prompt, block_size, fingerprint, turn.session.tenant)
        turn.prompt_blocks = ids
        if not ids:
            return 0
        try:
            with trace.use_span(turn.span, end_on_exit=False):
                hits = min(await self.store.lookup(ids), len(ids))
        except Exception as exc:  # noqa: BLE001 - a lookup only saves compute: without it, prefill computes all
            log.warning("KV store lookup failed, prefilling without store hits: %s", exc)
            return 0
        metrics.PROMPT_BLOCKS.inc(len(ids))
        metrics.STORE_HIT_BLOCKS.inc(hits)
        turn.context_tail = tail = self._context_tail(turn, ids, block_size, fingerprint)
        if tail is not None and hits == tail.full_blocks and await self._stored(turn, tail):
            turn.tail_tokens = tail.tokens
            turn.span.set_attribute("turn.store_tail_tokens", tail.tokens)
        return hits

    def _context_tail(self, turn: _Turn, ids: list[bytes], block_size: int, fingerprint: str) -> Tail | None:
        """The session history's tail, when the turn may load one (not beside reused shared blocks)."""
        if not self.tail_blocks or turn.segments is not None:
            return None
        history = len(turn.session.history)
        return context_tail(turn.prompt, history, ids, block_size, fingerprint, turn.session.tenant)

    async def _stored(self, turn: _Turn, tail: Tail) -> bool:
        try:
            with trace.use_span(turn.span, end_on_exit=False):
                return await self.store.lookup([tail.block_id]) == 1
        except Exception as exc:  # noqa: BLE001 - like the hits' lookup: without it, the tail is computed
            log.warning("KV store lookup of a tail failed, computing it: %s", exc)
            return False

    async def _prefill(self, turn: _Turn, hits: int) -> tuple[Placement, PrefillResult]:
        key = self._round_key(turn)
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
                held=partial(self._held, turn, hits),
                tail_tokens=turn.tail_tokens,
            )
            if key is not None:
                self.rounds.placed(key, placed.prefill.engine_id)
            prefill, decode = placed.prefill, placed.decode
            self._claim(turn, decode.address)  # before the prefill asks the decode engine what it holds
            turn.span.set_attributes(placed.attributes())
            metrics.record_placement(placed)
            request = PrefillRequest(
                request_id=turn.turn_id,
                session_id=turn.session.session_id,
                tenant=turn.session.tenant,
                token_ids=turn.prompt,
                sampling=turn.sampling,
                store_hit_blocks=hits,
                decode_address=decode.address,
                plan=placed.plan,
                segments=turn.segments,
                priority=self.priority_of(turn.session),
                store_tail_tokens=turn.tail_tokens,
                service_rank=self.turn_order.rank(turn.session),
            )
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
                return placed, response
            except EngineUnavailable as exc:
                # Blame is structured: the error names the engine that failed (the decode engine when
                # it could not take the handoff), never inferred from message text.
                failed = decode if exc.address == decode.address else prefill
                self._engine_failed(failed, exc)
                self._use_retry(turn, exc)

    @staticmethod
    def _round_key(turn: _Turn) -> RoundKey | None:
        """The group a turn joins: one that reuses shared blocks (an exact one computes them all)."""
        segmented = turn.segments
        if segmented is None or segmented.reuse.exact:
            return None
        spans = segmented.shared_spans()
        return RoundKey(turn.session.tenant, spans[0].block.round_index, segmented.reuse)

    async def _decode(self, turn: _Turn, decode: Engine, text: TurnText) -> AsyncGenerator[TurnEvent, None]:
        request = GenerateRequest(
            request_id=turn.turn_id,
            session_id=turn.session.session_id,
            tenant=turn.session.tenant,
            token_ids=turn.prompt + turn.output,
            prompt_tokens=len(turn.prompt),
            sampling=dataclasses.replace(
                turn.sampling,
                max_tokens=turn.sampling.max_tokens - len(turn.output),
                min_tokens=max(0, turn.sampling.min_tokens - len(turn.output)),
            ),
            priority=self.priority_of(turn.session),
            persist_tail=self.tail_blocks,
        )
        while True:
            streamed = False
            try:
                with self.registry.track(decode):
                    async with aclosing(self.engines.generate(decode.address, request, self._metadata(turn))) as chunks:
                        async for chunk in chunks:
                            tokens = list(chunk.token_ids)
                            stop_at = _stop_id_at(turn, tokens, before=len(turn.output))
                            if stop_at is not None:  # the engines know only EOS; caller stop ids end here
                                tokens = tokens[: stop_at + 1]
                            logprobs = list(chunk.logprobs[: len(tokens)])
                            turn.output.extend(tokens)
                            streamed = streamed or bool(tokens)
                            done = chunk.finished or stop_at is not None
                            delta = text.add(tokens, final=done)
                            if done or text.stopped:
                                # A stop string ends the turn here; closing the stream aborts the decode.
                                reason = "stop" if stop_at is not None or text.stopped else chunk.finish_reason
                                await self._release_kv(turn)
                                yield self._finish(turn, tokens, delta, reason or "length", logprobs=logprobs)
                                return
                            if tokens:
                                yield TurnEvent(token_ids=tokens, text=delta, logprobs=logprobs)
                raise EngineUnavailable(decode.address, "the stream ended before the turn finished")
            except EngineUnavailable as exc:
                self._engine_failed(decode, exc)
                if streamed:
                    raise RetryableError(f"decode engine {decode.engine_id} failed mid-turn; retry the turn") from exc
                self._use_retry(turn, exc)
                decode = self.placer.pick(Role.DECODE, turn.session)
                self._claim(turn, decode.address)
                turn.decode_engine, turn.decode_address = decode.engine_id, decode.address
                turn.span.set_attribute("turn.decode_engine", decode.engine_id)

    def _finish(
        self,
        turn: _Turn,
        tokens: list[int],
        text: str,
        reason: str,
        meta: TurnMeta | None = None,
        logprobs: list[TokenLogprob] | None = None,
    ) -> TurnEvent:
        # Committed before the final event is yielded: a caller that stops reading at `finished`
        # must still find the turn in the history.
        holder = "" if self.drops is not None else turn.decode_engine
        turn.session.commit(turn.prompt + turn.output, kv_holder=holder)
        turn.committed = True
        self.spans.end(turn.span, len(turn.prompt), turn.output)
        return TurnEvent(
            token_ids=tokens,
            text=text,
            metadata=meta,
            finished=True,
            finish_reason=reason,
            completion_tokens=len(turn.output),
            logprobs=logprobs or [],
        )

    async def _release_kv(self, turn: _Turn) -> None:
        """The history's tail is deleted from the store: the turn's decode engine persisted the new
        context's before its last token. With `drops`: the decode engine drops the turn's KV (its
        engine persisted it to the store before the last token) and both tails, awaited so the
        session's next turn finds it gone and reads the store."""
        await self._delete_context_tail(turn)
        block_size, fingerprint = self.registry.block_size, self.registry.fingerprint
        if self.drops is None or not turn.decode_address or block_size is None or fingerprint is None:
            return
        context = turn.prompt + turn.output
        ids = block_ids_for(context, block_size, fingerprint, turn.session.tenant)
        self._unclaim(turn)
        # Blocks other turns on this engine still need (every agent's prompt starts with the same
        # ones) stay: dropped, the engine would recompute them (`DecodeClaims`).
        ids = self.claims.unclaimed(turn.decode_address, ids)
        if self.tail_blocks:  # the one a relay kept there, and the one the decode engine cached
            new_tail = context_tail(context, len(context), ids, block_size, fingerprint, turn.session.tenant)
            ids += [tail.block_id for tail in (turn.context_tail, new_tail) if tail is not None]
        began = time.perf_counter()
        try:
            await self.drops.drop_kv(turn.decode_address, ids)
        except Exception as exc:  # noqa: BLE001 - a block left behind costs pool space, never tokens
            log.warning("dropping turn %s's KV from %s failed: %s", turn.turn_id, turn.decode_address, exc)
        _phase("release", turn.index, began)

    async def _delete_context_tail(self, turn: _Turn) -> None:
        """The history's tail is garbage once the turn completes (the next turn extends the new
        context); a delete that fails leaves it to the store's eviction."""
        if self.tail_store is None or turn.context_tail is None:
            return
        try:
            await self.tail_store.delete([turn.context_tail.block_id])
        except Exception as exc:  # noqa: BLE001 - a stale tail costs store space, never tokens
            log.warning("deleting session %s's old tail from the store failed: %s", turn.session.session_id, exc)

    def _held(self, turn: _Turn, hits: int, engine: Engine) -> int:
        """Leading store hits of `turn` that other turns in flight claim on decode `engine`."""
        return self.claims.held_prefix(engine.address, turn.prompt_blocks[:hits])

    def _claim(self, turn: _Turn, address: str) -> None:
        """With `drops`: the turn's prompt blocks are claimed on the decode engine at `address`
        (moved there from an earlier one), so other turns' drops leave them alone."""
        if self.drops is None:
            return
        self._unclaim(turn)
        turn.claim = (address, turn.prompt_blocks)
        self.claims.claim(address, turn.prompt_blocks)

    def _unclaim(self, turn: _Turn) -> None:
        if turn.claim is not None:
            self.claims.release(*turn.claim)
            turn.claim = None

    def _use_retry(self, turn: _Turn, exc: Exception) -> None:
        if turn.retries_left <= 0:
            raise RetryableError(f"turn failed on every engine tried ({exc}); retry the turn") from exc
        turn.retries_left -= 1

    def _engine_failed(self, engine: Engine, exc: Exception) -> None:
        log.warning("dropping %s engine %s at %s: %s", engine.status.role.value, engine.engine_id, engine.address, exc)
        metrics.ENGINE_FAILURES.labels(engine.status.role.value).inc()
        self.registry.mark_dead(engine.engine_id)
        self.engines.forget(engine.address)

    def _metadata(self, turn: _Turn) -> list[tuple[str, str]]:
        # The turn span is made current only while the trace context is injected: a span kept
        # current across this generator's yields would leak into the caller's context.
        with trace.use_span(turn.span, end_on_exit=False):
            return outgoing_metadata()


def _phase(phase: str, turn_index: int, since: float) -> float:
    """Observe `phase` of a turn as the time since `since` (perf_counter); returns now."""
    now = time.perf_counter()
    metrics.TURN_PHASE_SECONDS.labels(phase, "first" if turn_index == 0 else "later").observe(now - since)
    return now


def _stop_id_at(turn: _Turn, tokens: Sequence[int], before: int) -> int | None:
    """Index in `tokens` (output tokens after the first `before`) of the first caller stop id
    past min_tokens."""
    for i, token in enumerate(tokens):
        if token in turn.sampling.stop_token_ids and before + i + 1 > turn.sampling.min_tokens:
            return i
    return None
