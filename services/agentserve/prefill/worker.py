"""PrefillWorker: one turn's prefill — load store hits, compute the rest, persist, hand off."""

from __future__ import annotations

import dataclasses
import logging
from dataclasses import dataclass

import grpc

from agentserve.common.telemetry import tracer
from agentserve.engine.async_engine import AsyncEngine
from agentserve.engine.engine import LLMEngine
from agentserve.engine.sampling import SamplingParams
from agentserve.engine_service.kv_moves import KVMover

log = logging.getLogger(__name__)


@dataclass
class PrefillResult:
    first_token: int
    prompt_tokens: int
    cached_tokens: int
    engine_cached_tokens: int
    loaded_blocks: int
    persisted_blocks: int
    handoff_blocks: int
    finished: bool
    finish_reason: str


class PrefillWorker:
    def __init__(self, engine: AsyncEngine, mover: KVMover):
        self.engine = engine
        self.mover = mover

    async def prefill(self, token_ids: list[int], sampling: SamplingParams, tenant: str,
                      store_hit_blocks: int, decode_address: str) -> PrefillResult:
        def plan(engine: LLMEngine) -> tuple[list[bytes], int]:
            engine.validate(token_ids, sampling)  # ValueError before any KV moves
            ids = engine.block_ids_for(token_ids, tenant)
            return ids, engine.blocks.cached_prefix(ids)

        with tracer().start_as_current_span("prefill") as span:
            ids, resident = await self.engine.call(plan)
            if store_hit_blocks > len(ids):
                raise ValueError(f"store_hit_blocks {store_hit_blocks} exceeds the prompt's {len(ids)} full blocks")
            loaded = await self.mover.load_from_store(ids[resident:store_hit_blocks])
            first = dataclasses.replace(sampling, max_tokens=1)
            events = [event async for event in self.engine.generate(token_ids, first, tenant)]
            seq = events[-1].seq
            persisted = await self.mover.persist(ids[store_hit_blocks:])
            handed = await self._handoff(ids, decode_address) if decode_address else 0
            reason = seq.finish_reason or "length"
            finished = sampling.max_tokens == 1 or reason == "stop"
            span.set_attribute("prefill.cached_tokens", seq.num_cached_tokens)
            return PrefillResult(
                first_token=seq.token_ids[-1], prompt_tokens=len(token_ids),
                cached_tokens=seq.num_cached_tokens,
                engine_cached_tokens=min(resident * self.engine.engine.block_size, seq.num_cached_tokens),
                loaded_blocks=loaded, persisted_blocks=persisted, handoff_blocks=handed,
                finished=finished, finish_reason=reason if finished else "")

    async def _handoff(self, ids: list[bytes], decode_address: str) -> int:
        # A failed handoff is not a failed prefill: the decode engine (or a replacement the
        # scheduler picks) recomputes or loads what it lacks, and output stays identical.
        try:
            return await self.mover.handoff(ids, decode_address)
        except grpc.aio.AioRpcError as exc:
            log.warning("KV handoff to %s failed (%s); decode will recompute", decode_address, exc.code().name)
            return 0
