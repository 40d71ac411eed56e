"""DecodeWorker.hint_kv on a real engine: a pin holds resident blocks for its time and then lets
them go; priority reaches the pool's eviction policy; blocks not resident are not counted."""

from __future__ import annotations

import asyncio
from typing import cast

import pytest

from agentserve.contracts import KVHint, SamplingParams
from agentserve.decode.worker import DecodeWorker
from agentserve.engine.async_engine import AsyncEngine
from agentserve.engine.engine import LLMEngine
from agentserve.engine.engine_config import EngineConfig
from agentserve.engine_service.kv_moves import KVMover
from agentserve.kv.block_hash import block_ids_for

pytestmark = pytest.mark.unit

CONFIG = EngineConfig(kv_cache_bytes=4 << 20, block_size=4, eviction_policy="hinted")


@pytest.fixture(scope="module")
def base_engine(tiny_model_dir):
    return LLMEngine.from_dir(tiny_model_dir, CONFIG)


class HeldSleep:
    """asyncio.sleep stand-in: records each delay and returns once `elapse()` is called."""

    def __init__(self) -> None:
        self.delays: list[float] = []
        self._elapsed = asyncio.Event()

    async def __call__(self, seconds: float) -> None:
        self.delays.append(seconds)
        await self._elapsed.wait()

    def elapse(self) -> None:
        self._elapsed.set()


def test_a_pin_holds_the_blocks_for_its_time_and_priority_orders_eviction(base_engine):
    engine = AsyncEngine(LLMEngine(base_engine.model, base_engine.fingerprint, CONFIG))
    sleep = HeldSleep()
    worker = DecodeWorker(engine, cast(KVMover, None), sleep)  # no store or fabric moves here
    first, second = list(range(10, 22)), list(range(30, 42))  # 3 full blocks each
    ids_first = block_ids_for(first, 4, base_engine.fingerprint, "")
    ids_second = block_ids_for(second, 4, base_engine.fingerprint, "")

    async def main():
        params = SamplingParams(max_tokens=1, ignore_eos=True)
        for prompt in (first, second):
            [_ async for _ in engine.generate(prompt, params)]
        slot_of = await engine.call(lambda e: {b: e.blocks.lookup(b) for b in ids_first + ids_second})
        order = await engine.call(lambda e: e.blocks.eviction_order())
        assert order[:6] == [slot_of[b] for b in [*reversed(ids_first), *reversed(ids_second)]]

        # The first session matters more: its blocks go last.
        assert await worker.hint_kv(ids_first + [b"\x00" * 16], KVHint(priority=5, next_use_in_s=30.0)) == 3
        order = await engine.call(lambda e: e.blocks.eviction_order())
        assert order[-3:] == [slot_of[b] for b in reversed(ids_first)]

        # Pinned: in use, not evictable, not droppable, until the pin's time is over.
        assert await worker.hint_kv(ids_second, KVHint(pin_s=0.3)) == 3
        assert await worker.drop_kv(ids_second) == 0
        assert not set(await engine.call(lambda e: e.blocks.eviction_order())) & {slot_of[b] for b in ids_second}
        assert sleep.delays == [0.3]
        sleep.elapse()
        await asyncio.gather(*worker._unpins)  # the pin's release has run
        assert await worker.drop_kv(ids_second) == 3
        assert await worker.held(ids_second) == [False] * 3

    engine.start()
    try:
        asyncio.run(main())
    finally:
        engine.stop()
