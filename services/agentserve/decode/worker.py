"""DecodeWorker: continue a prefilled sequence with continuous batching, then persist its blocks;
relay path-B loads to prefill engines and say which blocks it holds (suffix-only handoff)."""

from __future__ import annotations

import asyncio
import dataclasses
import time
from collections.abc import AsyncIterator, Awaitable, Callable

import torch
from opentelemetry import trace

from agentserve.contracts import GenerateChunk, GenerateRequest, KVHint
from agentserve.engine.async_engine import AsyncEngine
from agentserve.engine.engine import LLMEngine
from agentserve.engine.runner import ExternalPrefix, block_prefix
from agentserve.engine_service import reused_kv
from agentserve.engine_service.kv_moves import KVMover
from agentserve.engine_service.relay import RelaySender
from agentserve.kv.block_hash import checked_block_ids
from agentserve.kv.eviction import Hint
from agentserve.v1 import fabric_pb2


class DecodeWorker:
    """`sleep` waits out a pin's time (`hint_kv`); tests pass one they release by hand."""

    def __init__(self, engine: AsyncEngine, mover: KVMover, sleep: Callable[[float], Awaitable[None]] = asyncio.sleep):
        self.engine = engine
        self.mover = mover
        self._sleep = sleep
        self.relay_sender = RelaySender(mover)
        self._unpins: set[asyncio.Task] = set()  # pins waiting to be released (a reference keeps each alive)

    async def held(self, block_ids: list[bytes]) -> list[bool]:
        """Whether each of `block_ids` is resident in this engine's prefix cache."""
        checked_block_ids(block_ids)
        return await self.engine.call(lambda e: [e.blocks.lookup(block_id) is not None for block_id in block_ids])

    def relay(self, block_ids: list[bytes], dst: str, hbm_first: bool = False) -> AsyncIterator[fabric_pb2.FabricChunk]:
        """Path B: the chunks of `block_ids` for the prefill engine `dst`, read from the store (with
        `hbm_first`, those past the leading ones held: see `RelaySender`)."""
        checked_block_ids(block_ids)
        return self.relay_sender.relay(block_ids, dst, hbm_first)

    async def drop_kv(self, block_ids: list[bytes]) -> int:
        """Drop the cached blocks among `block_ids` from the pool (those in use stay); how many."""
        checked_block_ids(block_ids)
        return await self.engine.call(lambda e: e.blocks.drop(block_ids))

    async def prefetch_kv(self, block_ids: list[bytes]) -> tuple[int, int]:
        """Read the blocks of `block_ids` this engine lacks from the store into its prefix cache;
        (loaded, already held). The store stops at the first block it lacks: what did not come,
        a later turn recomputes."""
        held = await self.held(block_ids)
        missing = [block_id for block_id, here in zip(block_ids, held, strict=True) if not here]
        return await self.mover.load_from_store(missing), len(block_ids) - len(missing)

    async def hint_kv(self, block_ids: list[bytes], hint: KVHint) -> int:
        """Pass `hint`'s priority and next use to the pool's eviction policy and, with a `pin_s`,
        hold the resident blocks for that long (a reference each, released when it ends); how
        many of `block_ids` are resident."""
        checked_block_ids(block_ids)
        # On the pool's clock: the eviction policy compares it with time.monotonic().
        advice = Hint(
            hint.priority, None, None if hint.next_use_in_s is None else time.monotonic() + hint.next_use_in_s
        )

        def apply(engine: LLMEngine) -> tuple[int, list[int]]:
            resident = engine.blocks.hint(block_ids, advice)
            pinned = (
                engine.blocks.hold([b for b in block_ids if engine.blocks.lookup(b) is not None]) if hint.pin_s else []
            )
            return resident, pinned

        resident, pinned = await self.engine.call(apply)
        if pinned:
            task = asyncio.get_running_loop().create_task(self._unpin_after(pinned, hint.pin_s))
            self._unpins.add(task)
            task.add_done_callback(self._unpins.discard)
        return resident

    async def _unpin_after(self, slots: list[int], seconds: float) -> None:
        await self._sleep(seconds)
        await self.engine.call(lambda e: e.blocks.release(slots))

    async def load_kv(self, blocks: list[bytes]) -> tuple[int, int]:
        imported = await self.engine.call(lambda e: sum(e.import_blocks(d) for d in blocks))
        return imported, len(blocks) - imported

    async def _context(self, request: GenerateRequest) -> ExternalPrefix | None:
        """The prompt's reused KV restored from the store (`reused_kv`), as the external prefix the
        decode runs over; None (the prompt is recomputed, a full recompute) without one, or when
        the store cannot give it back whole. Noted on the current span (`decode.reuse_context`)."""
        layout = request.context
        if layout is None:
            return None
        engine = self.engine.engine
        if layout.num_tokens != request.prompt_tokens or not layout.holds(request.token_ids):
            outcome: tuple[torch.Tensor, torch.Tensor] | str = "mismatch"
        else:
            blocks = reused_kv.context_blocks(engine, request.tenant)
            outcome = await reused_kv.restore(self.mover, blocks, layout, engine.dtype)
        trace.get_current_span().set_attribute(
            "decode.reuse_context", outcome if isinstance(outcome, str) else "restored"
        )
        if isinstance(outcome, str):
            return None
        return block_prefix(*outcome, engine.block_size)

    async def generate(self, request: GenerateRequest) -> AsyncIterator[GenerateChunk]:
        token_ids, prompt_tokens, sampling = request.token_ids, request.prompt_tokens, request.sampling
        if not token_ids:
            raise ValueError("prompt is empty: at least one token is required")
        if not 0 < prompt_tokens <= len(token_ids):
            raise ValueError(f"prompt_tokens must be in [1, {len(token_ids)}], got {prompt_tokens}")
        if sampling.seed is not None:
            # The prefill engine drew the first token from `seed`; continue from a different stream
            # so the decode's draws are not a replay of the prefill's.
            sampling = dataclasses.replace(sampling, seed=(sampling.seed * 6364136223846793005 + 1) % (1 << 63))
        first = True
        # The tokens after the prompt were generated already (the prefill's first): a grammar replays them.
        generated = len(token_ids) - prompt_tokens
        context = await self._context(request)
        async for event in self.engine.generate(
            token_ids,
            sampling,
            request.tenant,
            context,
            generated=generated,
            priority=request.priority,
            seal_tail=request.persist_tail,
            exact_prefix=context is None,
        ):
            persisted = 0
            if event.finished:
                seq = event.seq
                bs = self.engine.engine.block_size
                # The prompt's blocks were persisted by the prefill engine; this turn adds the rest,
                # and the partial last block when asked (the session's next turn loads it).
                ids = seq.block_ids[prompt_tokens // bs : seq.num_computed // bs]
                if seq.tail_id is not None:
                    ids.append(seq.tail_id)
                persisted = await self.mover.persist(ids)
            yield GenerateChunk(
                [event.token_id],
                event.finished,
                event.finish_reason or "",
                event.seq.num_cached_tokens if first else 0,
                persisted,
                [event.logprob] if event.logprob is not None else [],
            )
            first = False
