"""PrefillWorker: one turn's prefill in three steps: what to load (`turn_loads.choose_loads`, a pure
decision: store hits and a stored tail, by path A, B or both), how to compute (the loads streamed
while the prefill runs, or loaded into the pool first; `_compute`) and what to export (persist, hand
off what the decode engine lacks; `_export`).

No step but the compute fails the turn: a load that falls short (the store down, a relay failed)
leaves its blocks to be computed, a persist the store cannot take is skipped (`KVMover`), a failed
handoff leaves the decode engine to recompute. Greedy output is the same on every one of them.

With the engine's `layerwise` on, the loads stream into a `LayerStream` while the prefill already
runs (the engine starts once layer 0 of every block is in hand and waits per layer); the loaded
blocks never enter the pool, so the handoff sends the ones the decode engine lacks from the stream.

A request may name the context's stored tail after its hits (`store_tail_tokens`): one more stored
block, loaded by the plan's path behind the hits, whose first rows are KV of the prompt's next
tokens (`ExternalPrefix.tail_tokens`). It only ever enters the engine as an external prefix: the
block it completes is computed in the pool and cached, persisted and handed off under its full id.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import time
from collections.abc import Awaitable, Callable, Coroutine
from dataclasses import dataclass
from functools import partial
from typing import Any, TypeVar

import grpc

from agentserve.common.telemetry import tracer
from agentserve.contracts import KVPath, LoadPlan, PrefillRequest, PrefillResult
from agentserve.contracts.segments import SegmentedPrompt
from agentserve.engine.async_engine import AsyncEngine, TokenEvent
from agentserve.engine.engine import LLMEngine
from agentserve.engine.layer_stream import LayerStream
from agentserve.engine.reused_context import ContextBlocks
from agentserve.engine.runner import ExternalPrefix, LayerLoadError
from agentserve.engine.shared_context import PrefixKV, ReuseStats
from agentserve.engine_service import reused_kv
from agentserve.engine_service.kv_moves import HeldElsewhere, KVMover, Moved
from agentserve.engine_service.layer_loads import MIN_READ_BYTES, layers_per_read, store_by_layer
from agentserve.engine_service.peer_allowlist import PeerAllowList
from agentserve.engine_service.relay import relay_by_layer, relay_load
from agentserve.kv.block_hash import tail_block_id
from agentserve.kvstore.client import store_down
from agentserve.prefill.load_lanes import DEFAULT_LOAD_ORDER, LoadLanes
from agentserve.prefill.metrics import PHASE_SECONDS, turn_kind
from agentserve.prefill.pool_budget import PoolBudget, prompt_hold_blocks
from agentserve.prefill.turn_loads import PromptBlocks, TurnLoads, choose_loads

log = logging.getLogger(__name__)
T = TypeVar("T")


class PrefillWorker:
    def __init__(
        self,
        engine: AsyncEngine,
        mover: KVMover,
        min_layer_read_bytes: int = MIN_READ_BYTES,
        keep_kv: bool = True,
        peers: PeerAllowList | None = None,
        load_order: str = DEFAULT_LOAD_ORDER,
    ):
        """`min_layer_read_bytes`: a layerwise path-A read of a block carries at least this much
        (whole layers), see `layer_loads.MIN_READ_BYTES`. `keep_kv` False: a turn's prompt blocks
        leave the pool after its handoff (`PrefillConfig.keep_kv`). `peers`: the only decode engines
        a request may name to hand off to or relay through (None: any, for an engine run without a
        scheduler, as benchmarks do). `load_order`: whether this engine's loads take each way in
        (the store, a relay) one at a time in arrival order, or all at once (`prefill/load_lanes.py`)."""
        self.engine = engine
        self.peers = peers
        self.keep_kv = keep_kv
        self.mover = mover
        self.lanes = LoadLanes(load_order)
        self.layers_per_read = layers_per_read(mover, min_layer_read_bytes)
        # Without layerwise, loaded blocks sit in the pool until the turn's handoff: turns hold
        # their prompt's blocks from a budget of the pool's size (a layerwise turn's loads never
        # enter the pool, and the engine admits it by the room it needs).
        self.budget = None if engine.engine.config.layerwise else PoolBudget(engine.engine.blocks.num_slots)
        self.masters = reused_kv.StoredMasters()  # reused prompts' masters stored so far

    async def prefill(self, request: PrefillRequest) -> PrefillResult:
        if self.peers is not None:  # before any work: a refused address is never dialed
            await self.peers.check("decode_address", request.decode_address)
            await self.peers.check("relay_address", request.plan.relay_address)
        kind, began = turn_kind(request.store_hit_blocks), time.monotonic()
        if self.budget is None:
            result = await self._prefill(request, kind)
        else:
            async with self.budget.hold(prompt_hold_blocks(len(request.token_ids), self.engine.engine.block_size)):
                _observe("budget", kind, began)
                result = await self._prefill(request, kind)
        _observe("total", kind, began)
        return result

    async def _prefill(self, request: PrefillRequest, kind: str) -> PrefillResult:
        """Plan the loads (`choose_loads`), load and compute the first token, export the KV."""
        with tracer().start_as_current_span("prefill") as span:
            prompt = await self.engine.call(partial(_prompt_blocks, request=request))
            engine = self.engine.engine
            loads = choose_loads(request, prompt, engine.block_size, engine.config.layerwise)
            computed = await self._compute(request, loads, kind)
            seq = computed.event.seq
            if seq.prefill_started_s is not None:
                _observe("queue", kind, computed.submitted, seq.prefill_started_s)
                _observe("forward", kind, seq.prefill_started_s)
            exported = await self._export(request, prompt.ids, loads.hits, computed, kind)
            span.set_attributes(
                {
                    "prefill.cached_tokens": seq.num_cached_tokens,
                    "prefill.kv_path": computed.path.value,
                    "prefill.relayed_blocks": computed.relayed,
                    "prefill.handoff_held_blocks": exported.held,
                    **_reuse_attributes(seq.reuse_stats, computed.restored, exported.context),
                }
            )
            return _result(request, prompt.resident * engine.block_size, computed, exported)

    async def _compute(self, request: PrefillRequest, loads: TurnLoads, kind: str) -> _Computed:
        """Load `loads` and compute the prompt's first token over them: streamed when the engine is
        layerwise (the prefill runs while the KV arrives), else loaded into the pool first."""
        if not (self.engine.engine.config.layerwise and loads.blocks):
            return await self._load_then_compute(request, loads, kind)
        stream = self._stream(len(loads.blocks))
        async with asyncio.TaskGroup() as both:  # the prefill runs while its KV arrives
            loading = both.create_task(_timed(self._load_into(stream, loads.blocks, loads.plan), "load", kind))
            submitted = time.monotonic()
            event = await self._first_token(request, stream.external(loads.stored, loads.tail_tokens))
        elsewhere = _from_stream(stream, loads.blocks, self.engine.engine)
        return _Computed(event, submitted, *loading.result(), elsewhere=elsewhere)

    async def _load_then_compute(self, request: PrefillRequest, loads: TurnLoads, kind: str) -> _Computed:
        path, loaded, relayed = await _timed(self._load(loads.blocks, loads.plan), "load", kind)
        prefix = None
        if loads.tail is not None and loaded == len(loads.blocks):
            take = partial(_take_tail, tail_id=loads.tail, at=loads.hits, tokens=loads.tail_tokens)
            prefix = await self.engine.call(take)
        # Shared blocks are reused here only: a layerwise prefill over streamed store hits
        # (`_compute`) computes on that prefix, exactly.
        context, restored = await self._context(request)
        submitted = time.monotonic()
        event = await self._first_token(request, prefix, request.segments, context)
        return _Computed(event, submitted, path, loaded, relayed, restored=restored)

    async def _context(self, request: PrefillRequest) -> tuple[PrefixKV | None, str]:
        """The session's stored context restored as the prompt's prefix, for a prefill that reuses
        shared blocks (`reused_kv`), and what became of it: "restored", "none" (not asked, or not a
        reusing prefill), "mismatch" (not this prompt's first tokens, or past its first shared
        block), "missing" or "corrupt" (the store could not give it back: recomputed)."""
        layout, segments, engine = request.context, request.segments, self.engine.engine
        if layout is None or segments is None or segments.reuse.exact or engine.segmented is None:
            return None, "none"
        spans = segments.shared_spans()
        first_shared = spans[0].start if spans else len(request.token_ids)
        if not layout.holds(request.token_ids) or not 0 < layout.num_tokens <= first_shared:
            return None, "mismatch"
        restored = await reused_kv.restore(self.mover, self._blocks(request.tenant), layout, engine.dtype)
        if isinstance(restored, str):
            return None, restored
        return PrefixKV(*restored), "restored"

    def _blocks(self, tenant: str) -> ContextBlocks:
        return reused_kv.context_blocks(self.engine.engine, tenant)

    async def _first_token(
        self,
        request: PrefillRequest,
        prefix: ExternalPrefix | None,
        segments: SegmentedPrompt | None = None,
        context: PrefixKV | None = None,
    ) -> TokenEvent:
        """Compute the prompt over `prefix` (or, reusing `segments`, over the restored `context`)
        and sample its first token; the engine's last event."""
        sampling = request.sampling
        first = dataclasses.replace(sampling, max_tokens=1, min_tokens=min(sampling.min_tokens, 1))
        # The prompt's own tail (its partial last block) is handed off with its full blocks: the
        # decode engine then computes only the first token's KV, not that block again.
        generating = self.engine.generate(
            request.token_ids,
            first,
            request.tenant,
            prefix,
            priority=request.priority,
            segments=segments,
            seal_tail=bool(request.decode_address),
            rank=request.service_rank,
            segment_prefix=context,
        )
        events = [event async for event in generating]
        return events[-1]

    async def _export(
        self, request: PrefillRequest, ids: list[bytes], hits: int, computed: _Computed, kind: str
    ) -> _Exported:
        """Persist the prompt's blocks the store lacks and hand the decode engine the ones it lacks.

        The prompt's blocks are pinned from the end of the prefill until its persist and handoff
        have exported them: the engine steps other sequences meanwhile, and an evicted block would
        be neither persisted nor handed off. Not before: a turn waiting for slots while holding
        pins could wait on another doing the same, for ever; an evicted hit is only recomputed."""
        seq, decode_address = computed.event.seq, request.decode_address
        # The prompt's blocks, then the block its first token completed or the prompt's tail.
        handed_ids = await self.engine.call(lambda e: e.kv_ids(seq))
        with self.engine.pinning() as pinned:
            await self.engine.call(lambda e: pinned.extend(_pin_resident(e, ids, hits, handed_ids[len(ids) :])))
            persisted = await _timed(self.mover.persist(ids[request.store_hit_blocks :]), "persist", kind)
            held, handed = (
                await _timed(self._handoff(handed_ids, decode_address, computed.elsewhere), "handoff", kind)
                if decode_address
                else (0, Moved())
            )
        if not self.keep_kv:  # after the unpin (posted at the exit above); blocks other turns use stay
            await _timed(self.engine.call(lambda e: e.blocks.drop(handed_ids)), "drop", kind)
        context = None
        if seq.reused is not None and request.segments is not None:
            reused, seq.reused = seq.reused, None
            context = await _timed(
                reused_kv.persist(
                    self.mover, self._blocks(request.tenant), request.segments, reused, request.context, self.masters
                ),
                "persist",
                kind,
            )
        return _Exported(persisted, held, handed, context)

    def _stream(self, num_blocks: int) -> LayerStream:
        config = self.engine.engine.model_config
        block_shape = (self.engine.engine.block_size, config.num_key_value_heads, config.head_dim)
        return LayerStream(
            config.num_hidden_layers,
            num_blocks,
            block_shape,
            self.engine.engine.dtype,
            while_waiting=self.engine.serve_commands,
            wake=self.engine.wake,
        )

    async def _load_into(self, stream: LayerStream, ids: list[bytes], plan: LoadPlan) -> tuple[KVPath, int, int]:
        """`_load` into `stream`; a failure or a short load fails the stream (the engine then
        recomputes) instead of the turn."""
        mover = self.mover

        async def by_a(part: list[bytes], at: int) -> int:
            return await store_by_layer(mover, part, stream, at, self.layers_per_read)

        async def by_b(part: list[bytes], at: int, relay_address: str) -> int:
            return await relay_by_layer(mover, part, relay_address, stream, at, plan.relay_hbm_first)

        try:
            result = await self._load(ids, plan, by_a, by_b)
        except Exception as exc:  # noqa: BLE001 - the prefill goes on without the store's KV
            if store_down(exc):
                mover.store_skipped("load", len(ids), exc)
            else:
                log.warning("layerwise load of %d blocks failed (%r); the prefill recomputes them", len(ids), exc)
            stream.fail(exc)
            return KVPath.A, 0, 0
        if not stream.complete:
            stream.fail(LayerLoadError(f"{result[1]} of {len(ids)} blocks arrived"))
        return result

    async def _load(
        self, ids: list[bytes], plan: LoadPlan, by_a: LoadLeg | None = None, by_b: RelayLeg | None = None
    ) -> tuple[KVPath, int, int]:
        """Load `ids` by the plan's path; returns (path taken, blocks loaded, of which by path B).

        `by_a(part, at)` / `by_b(part, at, relay_address)` move the blocks `part`, which start at
        index `at` of `ids`; by default into the engine's pool (`load_from_store`, `relay_load`)."""
        mover, lanes = self.mover, self.lanes
        into_a = by_a or (lambda part, at: mover.load_from_store(part))
        into_b = by_b or (lambda part, at, relay_address: relay_load(mover, part, relay_address, plan.relay_hbm_first))

        async def load_a(part: list[bytes], at: int) -> int:
            if not part:  # a plan with nothing by the store does not queue for it
                return await into_a(part, at)
            async with lanes.lane("store"):
                return await into_a(part, at)

        async def load_b(part: list[bytes], at: int, relay_address: str) -> int:
            async with lanes.lane(f"relay {relay_address}"):
                return await into_b(part, at, relay_address)

        if not ids:
            return plan.path, 0, 0  # nothing to load: the plan stands, trivially
        by_relay = {KVPath.A: 0, KVPath.B: len(ids), KVPath.SPLIT: min(plan.relay_blocks, len(ids))}[plan.path]
        if not by_relay:
            return KVPath.A, await load_a(ids, 0), 0
        by_store = len(ids) - by_relay
        async with asyncio.TaskGroup() as both:  # a failure of one leg cancels the other
            leg_a = both.create_task(load_a(ids[:by_store], 0))
            leg_b = both.create_task(self._relay(load_b(ids[by_store:], by_store, plan.relay_address), plan))
        loaded_a, relayed = leg_a.result(), leg_b.result()
        if relayed is None:  # the relay failed: its blocks come by path A after all
            return KVPath.A, loaded_a + await load_a(ids[by_store:], by_store), 0
        if relayed < by_relay:  # the relay stopped short: the rest of its part still comes by path A
            log.warning(
                "path-B relay via %s stopped short: %d of %d blocks; the rest by path A",
                plan.relay_address,
                relayed,
                by_relay,
            )
            loaded_a += await load_a(ids[by_store + relayed :], by_store + relayed)
        return plan.path, loaded_a + relayed, relayed

    async def _relay(self, relaying: Awaitable[int], plan: LoadPlan) -> int | None:
        relay_address = plan.relay_address
        try:
            return await relaying
        except (grpc.aio.AioRpcError, ValueError) as exc:
            detail = exc.code().name if isinstance(exc, grpc.aio.AioRpcError) else str(exc)
            log.warning("path-B relay via %s failed (%s); loading by path A", relay_address, detail)
            return None

    async def _handoff(
        self, ids: list[bytes], decode_address: str, elsewhere: HeldElsewhere | None = None
    ) -> tuple[int, Moved | None]:
        """Suffix-only handoff: send the full blocks the decode engine lacks (it keeps the previous
        turn's and what it relayed); returns (blocks it held, what was sent), None sent if it failed."""
        # A failed handoff is not a failed prefill: the decode engine (or a replacement the
        # scheduler picks) recomputes or loads what it lacks, and output stays identical.
        try:
            lacking = await self.mover.lacking(decode_address, ids)
            return len(ids) - len(lacking), await self.mover.handoff(lacking, decode_address, elsewhere)
        except (grpc.aio.AioRpcError, ValueError) as exc:
            detail = exc.code().name if isinstance(exc, grpc.aio.AioRpcError) else str(exc)
            log.warning("KV handoff to %s failed (%s); decode will recompute", decode_address, detail)
            return 0, None


def _observe(phase: str, kind: str, since: float, until: float | None = None) -> None:
    PHASE_SECONDS.labels(phase, kind).observe((time.monotonic() if until is None else until) - since)


async def _timed(step: Awaitable[T], phase: str, kind: str) -> T:
    began = time.monotonic()
    try:
        return await step
    finally:
        _observe(phase, kind, began)


LoadLeg = Callable[[list[bytes], int], Coroutine[Any, Any, int]]
RelayLeg = Callable[[list[bytes], int, str], Coroutine[Any, Any, int]]


@dataclass(frozen=True)
class _Computed:
    """A prefill's first token (`event`, submitted to the engine at `submitted`, monotonic) and its
    loads: the path they took, the blocks loaded, of which relayed; `elsewhere` serves the loaded
    blocks that never entered the pool (a layerwise stream's) to the handoff."""

    event: TokenEvent
    submitted: float
    path: KVPath
    loaded: int
    relayed: int
    elsewhere: HeldElsewhere | None = None
    restored: str = "none"  # what became of the session's stored context (`PrefillWorker._context`)


@dataclass(frozen=True)
class _Exported:
    """Blocks persisted; blocks the decode engine held already and what was sent (None: the
    handoff failed)."""

    persisted: int
    held: int
    handed: Moved | None
    context: reused_kv.Persisted | None = None  # the prompt's reused KV as stored, if it reused any


def _prompt_blocks(engine: LLMEngine, request: PrefillRequest) -> PromptBlocks:
    """What `engine` holds of the request's prompt; ValueError for a bad request, before any KV moves."""
    engine.validate(request.token_ids, request.sampling)
    ids = engine.block_ids_for(request.token_ids, request.tenant)
    if request.store_hit_blocks > len(ids):
        raise ValueError(f"store_hit_blocks {request.store_hit_blocks} exceeds the prompt's {len(ids)} full blocks")
    return PromptBlocks(ids, engine.blocks.cached_prefix(ids), _tail_id(engine, request, ids))


def _result(request: PrefillRequest, resident_tokens: int, computed: _Computed, exported: _Exported) -> PrefillResult:
    """The turn's result; `resident_tokens`: the prompt's tokens the engine held before the turn."""
    seq, handed = computed.event.seq, exported.handed or Moved()
    reason = seq.finish_reason or "length"
    finished = request.sampling.max_tokens == 1 or reason == "stop"
    return PrefillResult(
        first_token=seq.token_ids[-1],
        prompt_tokens=len(request.token_ids),
        cached_tokens=seq.num_cached_tokens,
        engine_cached_tokens=min(resident_tokens, seq.num_cached_tokens),
        loaded_blocks=computed.loaded,
        persisted_blocks=exported.persisted,
        handoff_blocks=handed.blocks,
        finished=finished,
        finish_reason=reason if finished else "",
        kv_path=computed.path,
        relayed_blocks=computed.relayed,
        handoff_bytes=handed.bytes,
        handoff_held_blocks=exported.held,
        handoff_failed=exported.handed is None,
        first_logprob=computed.event.logprob,
        context=exported.context.layout if exported.context is not None else None,
    )


def _reuse_attributes(
    stats: ReuseStats | None, restored: str, context: reused_kv.Persisted | None
) -> dict[str, str | int | list[str]]:
    """How a segmented prefill took its prompt, for its span: `prefill.reuse` is "collective"
    (its shared blocks reused against the round's masters), "lead" (it computed the masters it
    lacked), "fallback" (the deviation passed the threshold: recomputed) or "exact"; the stored
    context restored as its prefix, and what it stored."""
    if stats is None:
        return {}
    if stats.led:
        path = "lead"
    elif stats.fell_back:
        path = "fallback"
    else:
        path = "exact" if stats.exact else "collective"
    attributes: dict[str, str | int | list[str]] = {
        "prefill.reuse": path,
        "prefill.reuse_recomputed_shared_tokens": stats.recomputed_shared_tokens,
        "prefill.reuse_shared_tokens": stats.shared_tokens,
        "prefill.reuse_context": restored,
    }
    if context is not None:
        layout = context.layout
        attributes |= {
            "prefill.context_tokens": layout.num_tokens,
            "prefill.context_masters_stored": context.masters,
            "prefill.context_diffs_stored": context.diffs,
            "prefill.context_master_ids": [block_id.hex() for block_id in layout.master_ids],
            "prefill.context_diff_ids": [block_id.hex() for block_id in layout.diff_ids],
        }
    return attributes


def _tail_id(engine: LLMEngine, request: PrefillRequest, ids: list[bytes]) -> bytes | None:
    """The id of the stored tail `request` names, None if it names none; ValueError if it cannot be
    one of its prompt's (a tail holds fewer than a block, and at least one token follows it)."""
    tokens, hits, bs = request.store_tail_tokens, request.store_hit_blocks, engine.block_size
    if not tokens:
        return None
    if tokens >= bs or hits * bs + tokens >= len(request.token_ids):
        raise ValueError(
            f"store_tail_tokens {tokens} must be below the block size {bs} and leave a prompt token after "
            f"store_hit_blocks {hits}"
        )
    parent = ids[hits - 1] if hits else None
    return tail_block_id(
        parent, engine.fingerprint, request.tenant, request.token_ids[hits * bs : hits * bs + tokens], bs
    )


def _take_tail(engine: LLMEngine, tail_id: bytes, at: int, tokens: int) -> ExternalPrefix | None:
    """The loaded tail (block `at` of the prompt, `tokens` of it valid) as an external prefix, taken
    out of the pool, which it entered under its own id as loads do: only its copy goes on, into the
    block it completes. None if it was evicted meanwhile (its tokens are then computed)."""
    slot = engine.blocks.lookup(tail_id)
    if slot is None:
        return None
    k, v = engine.pool.read_blocks([slot])
    engine.blocks.drop([tail_id])
    return ExternalPrefix(at + 1, lambda layer: (k[layer], v[layer]), first_block=at, tail_tokens=tokens)


def _pin_resident(engine: LLMEngine, ids: list[bytes], loaded_blocks: int, after: list[bytes]) -> list[int]:
    """Pin the prompt's resident blocks: its leading run and, after a layerwise prefill (whose loaded
    blocks never entered the pool), the run it computed from `loaded_blocks` on; and the resident
    ones of `after` (the block after the prompt's, or its tail: `LLMEngine.kv_ids`)."""
    leading = engine.blocks.cached_prefix(ids)
    computed = ids[loaded_blocks:] if leading < loaded_blocks else []
    rest = [block_id for block_id in after if engine.blocks.lookup(block_id) is not None]
    return engine.blocks.pin(ids[:leading] + computed[: engine.blocks.cached_prefix(computed)] + rest)


def _from_stream(stream: LayerStream, ids: list[bytes], engine: LLMEngine) -> HeldElsewhere:
    index = {block_id: i for i, block_id in enumerate(ids)}

    def serialize(block_id: bytes) -> bytes | None:
        i = index.get(block_id)
        if i is None or not stream.complete:
            return None
        return bytes(stream.serialize_block(i, block_id, engine.fingerprint, engine.config.block_kv_dtype))

    return serialize
