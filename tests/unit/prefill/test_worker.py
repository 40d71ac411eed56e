"""PrefillWorker on a real engine: the prompt's blocks stay resident until its persist and handoff
have taken them, whatever the engine allocates for other sequences meanwhile."""

from __future__ import annotations

import asyncio

import pytest

from agentserve.contracts import PrefillRequest, SamplingParams
from agentserve.engine.async_engine import AsyncEngine
from agentserve.engine.engine import LLMEngine
from agentserve.engine_service.kv_moves import KVMover, Moved
from agentserve.kv.block_manager import BlockManager
from agentserve.prefill.worker import PrefillWorker
from tests.support.engine_pool import CONFIG, Store, evict_everything_evictable

pytestmark = pytest.mark.unit

BLOCKS = 8


def prefill_with_a_sweep_before_the_handoff(tiny_model_dir) -> tuple[int, int, int, int]:
    """(blocks handed off: the prompt's full blocks and its 3-token tail, of them resident when the
    handoff exports, full blocks persisted, slots in use at the end)."""
    engine = AsyncEngine(LLMEngine.from_dir(tiny_model_dir, CONFIG))
    engine.start()
    try:

        async def main():
            mover = KVMover(engine, "prefill-0", Store(), "store:0")
            seen = {}

            async def lacking(decode_address, ids):  # the decode answers while the engine runs others
                await engine.call(evict_everything_evictable)
                return list(ids)

            async def handoff(ids, decode_address, elsewhere=None):
                seen["resident"] = await engine.call(lambda e: e.blocks.cached_prefix(ids))
                return Moved(len(ids), 0)

            mover.lacking, mover.handoff = lacking, handoff
            prompt = [(5 * i) % 150 + 7 for i in range(BLOCKS * engine.engine.block_size + 3)]
            request = PrefillRequest("r", "s", "", prompt, SamplingParams(max_tokens=1), decode_address="decode-0")
            result = await PrefillWorker(engine, mover).prefill(request)
            used = await engine.call(lambda e: e.blocks.stats()["used"])
            return result.handoff_blocks, seen["resident"], result.persisted_blocks, used

        return asyncio.run(main())
    finally:
        engine.stop()


def test_the_prompt_blocks_are_pinned_until_the_handoff_and_released_after(tiny_model_dir):
    assert prefill_with_a_sweep_before_the_handoff(tiny_model_dir) == (BLOCKS + 1, BLOCKS + 1, BLOCKS, 0)


def test_without_pins_the_sweep_evicts_them(tiny_model_dir, monkeypatch):
    monkeypatch.setattr(BlockManager, "pin", lambda self, ids: [])  # what the pins prevent
    assert prefill_with_a_sweep_before_the_handoff(tiny_model_dir) == (BLOCKS + 1, 0, BLOCKS, 0)


def cached_after_two_prefills(tiny_model_dir, keep_kv: bool) -> tuple[int, int]:
    """(blocks of the prompt cached in the pool after its prefill, the second turn's engine-cached tokens)."""
    engine = AsyncEngine(LLMEngine.from_dir(tiny_model_dir, CONFIG))
    engine.start()
    try:

        async def main():
            mover = KVMover(engine, "prefill-0", Store(), "store:0")

            async def lacking(decode_address, ids):
                return list(ids)

            async def handoff(ids, decode_address, elsewhere=None):
                return Moved(len(ids), 0)

            mover.lacking, mover.handoff = lacking, handoff
            worker = PrefillWorker(engine, mover, keep_kv=keep_kv)
            prompt = [(5 * i) % 150 + 7 for i in range(BLOCKS * engine.engine.block_size + 3)]
            first = PrefillRequest("r1", "s", "", prompt, SamplingParams(max_tokens=1), decode_address="decode-0")
            await worker.prefill(first)
            ids = await engine.call(lambda e: e.block_ids_for(prompt, ""))
            cached = await engine.call(lambda e: e.blocks.cached_prefix(ids))
            again = PrefillRequest("r2", "s", "", prompt + [9], SamplingParams(max_tokens=1), decode_address="decode-0")
            return cached, (await worker.prefill(again)).engine_cached_tokens

        return asyncio.run(main())
    finally:
        engine.stop()


def test_without_keep_kv_the_prompt_leaves_the_pool_after_the_handoff(tiny_model_dir):
    block_size = CONFIG.block_size
    assert cached_after_two_prefills(tiny_model_dir, keep_kv=True) == (BLOCKS, BLOCKS * block_size)
    # The store has the blocks (persisted); the next turn would load them, the engine holds none.
    assert cached_after_two_prefills(tiny_model_dir, keep_kv=False) == (0, 0)


def test_the_requests_priority_and_rank_order_it_in_the_engines_queue(tiny_model_dir, monkeypatch):
    queued = []
    add_request = LLMEngine.add_request

    def spy(self, *args, **kwargs):
        seq = add_request(self, *args, **kwargs)
        queued.append((seq.priority, seq.rank))
        return seq

    monkeypatch.setattr(LLMEngine, "add_request", spy)
    engine = AsyncEngine(LLMEngine.from_dir(tiny_model_dir, CONFIG))
    engine.start()
    try:
        mover = KVMover(engine, "prefill-0", Store(), "store:0")
        request = PrefillRequest("r", "s", "", [7, 8, 9], SamplingParams(max_tokens=1), priority=3, service_rank=5)
        asyncio.run(PrefillWorker(engine, mover).prefill(request))
    finally:
        engine.stop()
    assert queued == [(3, 5)]
