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


class PoolBudget:
    def __init__(self, capacity_blocks: int) -> None:
        if capacity_blocks <= 0:
            raise ValueError(f"capacity_blocks must be positive, got {capacity_blocks}")
        self.capacity = capacity_blocks
        self.taken = 0
        self._order = asyncio.Lock()  # FIFO: a large turn is not overtaken for ever by small ones
        self._room = asyncio.Condition()

    @asynccontextmanager
    async def hold(self, blocks: int) -> AsyncIterator[None]:
        """Wait (behind earlier turns) until `blocks` fit, hold them while the block runs."""
        need = min(blocks, self.capacity)
        async with self._order, self._room:
            await self._room.wait_for(lambda: self.taken + need <= self.capacity)
            self.taken += need
        try:
            yield
        finally:
            async with self._room:
                self.taken -= need
                self._room.notify_all()
