"""PrefillWorker: one turn's prefill — load store hits (path A, B or both), compute the rest,
persist, hand off what the decode engine lacks."""

from __future__ import annotations

import asyncio
import dataclasses
import logging

import grpc

from agentserve.common.telemetry import tracer
from agentserve.contracts import KVPath, LoadPlan, PrefillRequest, PrefillResult
from agentserve.engine.async_engine import AsyncEngine
from agentserve.engine.engine import LLMEngine
from agentserve.engine_service.kv_moves import KVMover, Moved
from agentserve.engine_service.relay import relay_load

log = logging.getLogger(__name__)


class PrefillWorker:
    def __init__(self, engine: AsyncEngine, mover: KVMover):
        self.engine = engine
        self.mover = mover

    async def prefill(self, request: PrefillRequest) -> PrefillResult:
        token_ids, sampling, tenant = request.token_ids, request.sampling, request.tenant
        store_hit_blocks, decode_address = request.store_hit_blocks, request.decode_address

        def prepare(engine: LLMEngine) -> tuple[list[bytes], int]:
            engine.validate(token_ids, sampling)  # ValueError before any KV moves
            ids = engine.block_ids_for(token_ids, tenant)
            return ids, engine.blocks.cached_prefix(ids)

        with tracer().start_as_current_span("prefill") as span:
            ids, resident = await self.engine.call(prepare)
            if store_hit_blocks > len(ids):
                raise ValueError(f"store_hit_blocks {store_hit_blocks} exceeds the prompt's {len(ids)} full blocks")
            path, loaded, relayed = await self._load(ids[resident:store_hit_blocks], request.plan)
            first = dataclasses.replace(sampling, max_tokens=1, min_tokens=min(sampling.min_tokens, 1))
            events = [event async for event in self.engine.generate(token_ids, first, tenant)]
            seq, first_logprob = events[-1].seq, events[-1].logprob
            # The prompt's blocks are pinned from the end of the prefill until its persist and handoff
            # have exported them: the engine steps other sequences meanwhile, and an evicted block would
            # be neither persisted nor handed off. Not before: a turn waiting for slots while holding
            # pins could wait on another doing the same, for ever; an evicted hit is only recomputed.
            with self.engine.pinning() as pinned:
                await self.engine.call(lambda e: pinned.extend(e.blocks.pin(ids[: e.blocks.cached_prefix(ids)])))
                persisted = await self.mover.persist(ids[store_hit_blocks:])
                held, handed = await self._handoff(ids, decode_address) if decode_address else (0, Moved())
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

    async def _load(self, ids: list[bytes], plan: LoadPlan) -> tuple[KVPath, int, int]:
        """Load `ids` by the plan's path; returns (path taken, blocks loaded, of which by path B)."""
        if not ids:
            return plan.path, 0, 0  # nothing to load: the plan stands, trivially
        by_b = {KVPath.A: 0, KVPath.B: len(ids), KVPath.SPLIT: min(plan.relay_blocks, len(ids))}[plan.path]
        if not by_b:
            return KVPath.A, await self.mover.load_from_store(ids), 0
        by_a = len(ids) - by_b
        async with asyncio.TaskGroup() as both:  # a failure of one leg cancels the other
            leg_a = both.create_task(self.mover.load_from_store(ids[:by_a]))
            leg_b = both.create_task(self._relay(ids[by_a:], plan.relay_address))
        loaded_a, relayed = leg_a.result(), leg_b.result()
        if relayed is None:  # the relay failed: its blocks come by path A after all
            return KVPath.A, loaded_a + await self.mover.load_from_store(ids[by_a:]), 0
        if relayed < by_b:  # the relay stopped short: the rest of its part still comes by path A
            log.warning(
                "path-B relay via %s stopped short: %d of %d blocks; the rest by path A",
                plan.relay_address,
                relayed,
                by_b,
            )
            loaded_a += await self.mover.load_from_store(ids[by_a + relayed :])
        return plan.path, loaded_a + relayed, relayed

    async def _relay(self, ids: list[bytes], relay_address: str) -> int | None:
        try:
            return await relay_load(self.mover, ids, relay_address)
        except (grpc.aio.AioRpcError, ValueError) as exc:
            detail = exc.code().name if isinstance(exc, grpc.aio.AioRpcError) else str(exc)
            log.warning("path-B relay via %s failed (%s); loading by path A", relay_address, detail)
            return None

    async def _handoff(self, ids: list[bytes], decode_address: str) -> tuple[int, Moved | None]:
        """Suffix-only handoff: send the full blocks the decode engine lacks (it keeps the previous
        turn's and what it relayed); returns (blocks it held, what was sent), None sent if it failed."""
        # A failed handoff is not a failed prefill: the decode engine (or a replacement the
        # scheduler picks) recomputes or loads what it lacks, and output stays identical.
        try:
            lacking = await self.mover.lacking(decode_address, ids)
            return len(ids) - len(lacking), await self.mover.handoff(lacking, decode_address)
        except (grpc.aio.AioRpcError, ValueError) as exc:
            detail = exc.code().name if isinstance(exc, grpc.aio.AioRpcError) else str(exc)
            log.warning("KV handoff to %s failed (%s); decode will recompute", decode_address, detail)
            return 0, None
