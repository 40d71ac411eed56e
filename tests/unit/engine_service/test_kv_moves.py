"""Path A's load (`KVMover.load_from_store`) on a real engine: what it loads for a turn stays
resident, pinned, until the turn's sequence holds it, whatever the engine allocates meanwhile."""

from __future__ import annotations

import asyncio

import pytest

from agentserve.engine.async_engine import AsyncEngine
from agentserve.engine.engine import LLMEngine
from agentserve.engine_service.kv_moves import KVMover

from tests.support.engine_pool import CONFIG, Store, evict_everything_evictable

pytestmark = pytest.mark.unit


def load_then_sweep(source, pin: bool) -> tuple[int, int, int]:
    """Load every source block, sweep the pool, free the pins: (loaded, resident after the
    sweep, slots in use at the end)."""
    src_engine, ids, datas = source
    engine = AsyncEngine(LLMEngine(src_engine.model, src_engine.fingerprint, CONFIG))
    engine.start()
    try:
        async def main():
            mover = KVMover(engine, "prefill-0", Store(datas), "store:0")
            pinned: list[int] | None = [] if pin else None
            loaded = await mover.load_from_store(ids, pinned)
            await engine.call(evict_everything_evictable)  # other sequences' allocations
            resident = await engine.call(lambda e: e.blocks.cached_prefix(ids))
            engine.post(lambda e: e.blocks.free(pinned or []))
            used = await engine.call(lambda e: e.blocks.stats()["used"])
            return loaded, resident, used
        return asyncio.run(main())
    finally:
        engine.stop()


def test_loaded_blocks_are_pinned_until_freed(source):
    _, ids, _ = source
    assert load_then_sweep(source, pin=True) == (len(ids), len(ids), 0)


def test_without_pins_a_sweep_evicts_what_was_loaded(source):
    _, ids, _ = source
    assert load_then_sweep(source, pin=False) == (len(ids), 0, 0)  # why the prefill pins
