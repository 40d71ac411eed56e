"""PoolBudget: a prefill engine's KV pool promised to turns, so loads never outgrow the pool.

A turn without layerwise loads its store hits into the pool before the engine admits it, and its
blocks stay there until its handoff has exported them. Loads of several turns at once, started
without regard to room, can together hold more than the pool: the later imports then evict the
earlier turns' loaded blocks before those turns run, and each such turn recomputes what it loaded
(tests/unit/prefill/test_pool_budget.py shows it on a real engine), so a run slows down many times
over once a prefill engine's agents load more contexts at once than its pool holds (`bench
dualpath`'s baseline at 8 agents per engine on pools of 4 contexts; docs/dualpath.md). A real
engine allocates a request's KV slots before it loads into them; this is that check, made before
the load: a turn takes its prompt's blocks from the budget (in arrival order) and returns them once
its handoff is done. A prompt larger than the whole pool waits for the pool to be empty and then
runs alone (the engine's own admission decides the rest).
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager


def prompt_hold_blocks(prompt_tokens: int, block_size: int) -> int:
    """Blocks a turn without layerwise holds from the budget: its prompt's, and one more (the first
    output token may open a block)."""
    return -(-prompt_tokens // block_size) + 1


class PoolLedger:
    """The budget's arithmetic without waiting: how many blocks a prompt holds, whether they fit,
    and taking and returning them. `PoolBudget` waits on it in an engine; the simulator's prefill
    engine (`sim/prefill.py`) admits turns by the same ledger in virtual time."""

    def __init__(self, capacity_blocks: int) -> None:
        if capacity_blocks <= 0:
            raise ValueError(f"capacity_blocks must be positive, got {capacity_blocks}")
        self.capacity = capacity_blocks
        self.taken = 0

    def need(self, blocks: int) -> int:
        """What a prompt of `blocks` holds: a prompt larger than the pool holds all of it."""
        return min(blocks, self.capacity)

    def fits(self, need: int) -> bool:
        return self.taken + need <= self.capacity

    def take(self, need: int) -> None:
        self.taken += need

    def give_back(self, need: int) -> None:
        self.taken -= need


class PoolBudget:
    def __init__(self, capacity_blocks: int) -> None:
        self.ledger = PoolLedger(capacity_blocks)
        self._order = asyncio.Lock()  # FIFO: a large turn is not overtaken for ever by small ones
        self._room = asyncio.Condition()

    @property
    def taken(self) -> int:
        return self.ledger.taken

    @asynccontextmanager
    async def hold(self, blocks: int) -> AsyncIterator[None]:
        """Wait (behind earlier turns) until `blocks` fit, hold them while the block runs."""
        need = self.ledger.need(blocks)
        async with self._order, self._room:
            await self._room.wait_for(lambda: self.ledger.fits(need))
            self.ledger.take(need)
        try:
            yield
        finally:
            async with self._room:
                self.ledger.give_back(need)
                self._room.notify_all()
