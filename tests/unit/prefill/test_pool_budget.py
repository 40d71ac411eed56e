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
