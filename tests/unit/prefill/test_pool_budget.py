"""PoolBudget: turns hold their prompt's blocks of the pool, wait in arrival order for room, and a
prompt larger than the pool runs alone."""

from __future__ import annotations

import asyncio

import pytest

from agentserve.prefill.pool_budget import PoolBudget

pytestmark = pytest.mark.unit


def test_turns_wait_in_order_for_room_and_return_it() -> None:
    async def go() -> list[str]:
        budget = PoolBudget(10)
        log: list[str] = []
        release = {name: asyncio.Event() for name in ("a", "b", "c", "d")}

        async def turn(name: str, blocks: int) -> None:
            async with budget.hold(blocks):
                log.append(f"+{name} {budget.taken}")
                await release[name].wait()
            log.append(f"-{name}")

        tasks = [asyncio.create_task(turn(n, b)) for n, b in (("a", 6), ("b", 6), ("c", 2), ("d", 40))]
        await asyncio.sleep(0.01)
        # b does not fit beside a; c would, but waits behind b (arrival order).
        assert log == ["+a 6"]
        release["a"].set()
        await asyncio.sleep(0.01)
        assert log == ["+a 6", "-a", "+b 6", "+c 8"]
        release["b"].set()
        release["c"].set()
        await asyncio.sleep(0.01)
        # d asks for more than the pool: it takes all of it, alone.
        assert log[-1] == "+d 10" and budget.taken == 10
        release["d"].set()
        await asyncio.gather(*tasks)
        assert budget.taken == 0
        return log

    assert asyncio.run(go())[-1] == "-d"


def test_a_cancelled_turn_returns_its_blocks() -> None:
    async def go() -> int:
        budget = PoolBudget(4)

        async def hold() -> None:
            async with budget.hold(4):
                await asyncio.sleep(10)

        task = asyncio.create_task(hold())
        await asyncio.sleep(0.01)
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
        return budget.taken

    assert asyncio.run(go()) == 0
    with pytest.raises(ValueError, match="capacity_blocks must be positive"):
        PoolBudget(0)


def concurrent_later_turns(tiny_model_dir, pool_blocks: int, budget: bool) -> list[int]:
    """Three sessions' second turns at once on a prefill engine whose pool holds fewer blocks than
    their store hits together; each turn's cached tokens (the rest was recomputed)."""
    from agentserve.contracts import PrefillRequest, SamplingParams
    from agentserve.engine.async_engine import AsyncEngine
    from agentserve.engine.engine import LLMEngine
    from agentserve.engine.engine_config import EngineConfig
    from agentserve.engine_service.kv_moves import KVMover, Moved
    from agentserve.prefill.worker import PrefillWorker
    from tests.support.engine_pool import CONFIG, Store

    probe = LLMEngine.from_dir(tiny_model_dir, CONFIG)
    config = EngineConfig(kv_cache_bytes=pool_blocks * probe.pool.bytes_per_slot)
    engine = AsyncEngine(LLMEngine.from_dir(tiny_model_dir, config))
    engine.start()
    try:

        async def main() -> list[int]:
            mover = KVMover(engine, "prefill-0", Store(), "store:0")

            async def lacking(decode_address, ids):
                return []

            async def handoff(ids, decode_address, elsewhere=None):
                return Moved(0, 0)

            mover.lacking, mover.handoff = lacking, handoff
            worker = PrefillWorker(engine, mover, keep_kv=False)
            if not budget:
                worker.budget = None
            bs = engine.engine.block_size
            prompts = [[(7 * i + s) % 150 + 5 for i in range(8 * bs)] for s in range(3)]

            def turn(s: int, tokens: list[int], hits: int) -> PrefillRequest:
                return PrefillRequest(f"r{s}-{hits}", f"s{s}", "", tokens, SamplingParams(max_tokens=1), hits)

            for s, prompt in enumerate(prompts):  # first turns, one at a time: persisted, then dropped
                await worker.prefill(turn(s, prompt, 0))
            later = [turn(s, prompt + [3] * 5, 8) for s, prompt in enumerate(prompts)]
            results = await asyncio.gather(*(worker.prefill(r) for r in later))
            return [r.cached_tokens for r in results]

        return asyncio.run(main())
    finally:
        engine.stop()


def test_concurrent_loads_beyond_the_pool_recompute_without_the_budget_and_not_with_it(tiny_model_dir):
    """`bench dualpath`'s baseline slowing down once a prefill engine's agents outnumber its pool's
    contexts, in small: loads started without regard to room evict each other's loaded blocks before
    their turns run."""
    from agentserve.engine.engine_config import EngineConfig

    bs = EngineConfig().block_size
    assert concurrent_later_turns(tiny_model_dir, pool_blocks=12, budget=True) == [8 * bs] * 3
    without = concurrent_later_turns(tiny_model_dir, pool_blocks=12, budget=False)
    assert min(without) < 8 * bs, without
