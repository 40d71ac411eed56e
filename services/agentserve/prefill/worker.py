"""PrefillWorker: one turn's prefill — load store hits (path A, B or both), compute the rest,
persist, hand off what the decode engine lacks.

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
from functools import partial
from typing import Any, TypeVar

import grpc

from agentserve.common.telemetry import tracer
from agentserve.contracts import KVPath, LoadPlan, PrefillRequest, PrefillResult
from agentserve.engine.async_engine import AsyncEngine
from agentserve.engine.engine import LLMEngine
from agentserve.engine.layer_stream import LayerStream
from agentserve.engine.runner import ExternalPrefix, LayerLoadError
from agentserve.engine_service.kv_moves import HeldElsewhere, KVMover, Moved
from agentserve.engine_service.layer_loads import MIN_READ_BYTES, layers_per_read, store_by_layer
from agentserve.engine_service.peer_allowlist import PeerAllowList
from agentserve.engine_service.relay import relay_by_layer, relay_load
from agentserve.kv.block_hash import tail_block_id
from agentserve.kvstore.client import store_down
from agentserve.prefill.load_lanes import DEFAULT_LOAD_ORDER, LoadLanes
from agentserve.prefill.metrics import PHASE_SECONDS, turn_kind
from agentserve.prefill.pool_budget import PoolBudget

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

    async def prefill(self, request: PrefillRequest) -> PrefillResult:
        if self.peers is not None:  # before any work: a refused address is never dialed
            await self.peers.check("decode_address", request.decode_address)
            await self.peers.check("relay_address", request.plan.relay_address)
        kind, began = turn_kind(request.store_hit_blocks), time.monotonic()
        if self.budget is None:
            result = await self._prefill(request, kind)
        else:
            # The prompt's blocks and one more (the first output token may open a block).
            async with self.budget.hold(-(-len(request.token_ids) // self.engine.engine.block_size) + 1):
                _observe("budget", kind, began)
                result = await self._prefill(request, kind)
        _observe("total", kind, began)
        return result

    async def _prefill(self, request: PrefillRequest, kind: str) -> PrefillResult:
        token_ids, sampling, tenant, priority = request.token_ids, request.sampling, request.tenant, request.priority
        store_hit_blocks, decode_address = request.store_hit_blocks, request.decode_address
        tail_tokens, rank = request.store_tail_tokens, request.service_rank

        def prepare(engine: LLMEngine) -> tuple[list[bytes], int, bytes | None]:
            engine.validate(token_ids, sampling)  # ValueError before any KV moves
            ids = engine.block_ids_for(token_ids, tenant)
            if store_hit_blocks > len(ids):
                raise ValueError(f"store_hit_blocks {store_hit_blocks} exceeds the prompt's {len(ids)} full blocks")
            return ids, engine.blocks.cached_prefix(ids), _tail_id(engine, request, ids)

        with tracer().start_as_current_span("prefill") as span:
            ids, resident, tail_id = await self.engine.call(prepare)
            first = dataclasses.replace(sampling, max_tokens=1, min_tokens=min(sampling.min_tokens, 1))
            layerwise = self.engine.engine.config.layerwise
            # A prefill computes at least the prompt's last token. A layerwise one streams whole
            # blocks in front of what it computes, so a prompt of whole blocks that are all stored
            # (a turn sent again, a shared prefix warmed twice) loads all but its last, which it
            # recomputes; loaded into the pool (not layerwise), the engine's own prefix cache does.
            loadable = store_hit_blocks
            if layerwise:
                loadable = min(store_hit_blocks, (len(token_ids) - 1) // self.engine.engine.block_size)
            to_load = ids[resident:loadable]
            # The tail extends the hits only where the engine would otherwise compute from them on
            # (not past a block it holds whole, not beside shared blocks it reuses).
            tail = tail_id if resident <= loadable == store_hit_blocks and request.segments is None else None
            if tail is not None:
                to_load.append(tail)
            tail_tokens = tail_tokens if tail is not None else 0
            stored = loadable + (1 if tail is not None else 0)
            plan = request.plan.scaled_to(len(to_load), stored)  # a split's share of what loads
            stream, elsewhere = None, None
            # The prompt's own tail (its partial last block) is handed off with its full blocks: the
            # decode engine then computes only the first token's KV, not that block again.
            hand_tail = bool(decode_address)
            if layerwise and to_load:
                stream = self._stream(len(to_load))
                elsewhere = _from_stream(stream, to_load, self.engine.engine.fingerprint)
                async with asyncio.TaskGroup() as both:  # the prefill runs while its KV arrives
                    loading = both.create_task(_timed(self._load_into(stream, to_load, plan), "load", kind))
                    external = stream.external(stored, tail_tokens)
                    submitted = time.monotonic()
                    events = [
                        event
                        async for event in self.engine.generate(
                            token_ids, first, tenant, external, priority=priority, seal_tail=hand_tail, rank=rank
                        )
                    ]
                path, loaded, relayed = loading.result()
            else:
                path, loaded, relayed = await _timed(self._load(to_load, plan), "load", kind)
                tail_prefix = None
                if tail is not None and loaded == len(to_load):
                    tail_prefix = await self.engine.call(
                        partial(_take_tail, tail_id=tail, at=loadable, tokens=tail_tokens)
                    )
                # Shared blocks are reused here only: a layerwise prefill over streamed store hits
                # (above) computes on that prefix, exactly.
                segments = request.segments
                submitted = time.monotonic()
                generating = self.engine.generate(
                    token_ids,
                    first,
                    tenant,
                    tail_prefix,
                    priority=priority,
                    segments=segments,
                    seal_tail=hand_tail,
                    rank=rank,
                )
                events = [event async for event in generating]
            seq, first_logprob = events[-1].seq, events[-1].logprob
            if seq.prefill_started_s is not None:
                _observe("queue", kind, submitted, seq.prefill_started_s)
                _observe("forward", kind, seq.prefill_started_s)
            # The prompt's blocks are pinned from the end of the prefill until its persist and handoff
            # have exported them: the engine steps other sequences meanwhile, and an evicted block would
            # be neither persisted nor handed off. Not before: a turn waiting for slots while holding
            # pins could wait on another doing the same, for ever; an evicted hit is only recomputed.
            # The prompt's blocks, then the block its first token completed or the prompt's tail.
            handed_ids = await self.engine.call(lambda e: e.kv_ids(seq))
            with self.engine.pinning() as pinned:
                await self.engine.call(lambda e: pinned.extend(_pin_resident(e, ids, loadable, handed_ids[len(ids) :])))
                persisted = await _timed(self.mover.persist(ids[store_hit_blocks:]), "persist", kind)
                held, handed = (
                    await _timed(self._handoff(handed_ids, decode_address, elsewhere), "handoff", kind)
                    if decode_address
                    else (0, Moved())
                )
            if not self.keep_kv:  # after the unpin (posted at the exit above); blocks other turns use stay
                await _timed(self.engine.call(lambda e: e.blocks.drop(handed_ids)), "drop", kind)
            handoff_failed, handed = handed is None, handed or Moved()
            reason = seq.finish_reason or "length"
            finished = sampling.max_tokens == 1 or reason == "stop"
            span.set_attributes(
                {
                    "prefill.cached_tokens": seq.num_cached_tokens,
                    "prefill.kv_path": path.value,
                    "prefill.relayed_blocks": relayed,
                    "prefill.handoff_held_blocks": held,
                }
            )
            return PrefillResult(
                first_token=seq.token_ids[-1],
                prompt_tokens=len(token_ids),
                cached_tokens=seq.num_cached_tokens,
                engine_cached_tokens=min(resident * self.engine.engine.block_size, seq.num_cached_tokens),
                loaded_blocks=loaded,
                persisted_blocks=persisted,
                handoff_blocks=handed.blocks,
                finished=finished,
                finish_reason=reason if finished else "",
                kv_path=path,
                relayed_blocks=relayed,
                handoff_bytes=handed.bytes,
                handoff_held_blocks=held,
                handoff_failed=handoff_failed,
                first_logprob=first_logprob,
            )

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


def _from_stream(stream: LayerStream, ids: list[bytes], fingerprint: str) -> HeldElsewhere:
    index = {block_id: i for i, block_id in enumerate(ids)}

    def serialize(block_id: bytes) -> bytes | None:
        i = index.get(block_id)
        if i is None or not stream.complete:
            return None
        return bytes(stream.serialize_block(i, block_id, fingerprint))

    return serialize
