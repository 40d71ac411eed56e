"""PoolBudget: a prefill engine's KV pool promised to turns, so loads never outgrow the pool.

A turn without layerwise loads its store hits into the pool before the engine admits it, and its
blocks stay there until its handoff has exported them. Loads of several turns at once, started
without regard to room, can together hold more than the pool: the later imports then evict the
earlier turns' loaded blocks before those turns run, and each such turn recomputes what it loaded
(tests/unit/prefill/test_pool_budget.py shows it on a real engine). It is the mechanism behind
`bench dualpath`'s 16-agent baseline taking 15x as long as at 8 on prefill pools of 4 contexts (8
agents per prefill engine load up to 8 contexts at once into a pool of 4; at 8 agents, 4 fit), not
re-measured at 16 agents since. A real engine allocates a request's KV slots before it loads into
them; this is that check, made before the load: a turn takes its prompt's blocks from the budget
(in arrival order) and returns them once its handoff is done. A prompt larger than the whole pool
waits for the pool to be empty and then runs alone (the engine's own admission decides the rest).
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
