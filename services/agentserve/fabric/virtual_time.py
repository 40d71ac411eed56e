"""Simulated time for the fabric: a clock plus a sleep that never waits for real.

Pass `clock` and `clock.sleep` to a `TokenBucket` or `EmulatedNIC`, start the coroutines as
tasks and let `run_until_complete` advance time to each next wake-up once every task is blocked.
Unit tests use it for exact timings; a simulator can use it to run a fabric faster than real time.
"""

from __future__ import annotations

import asyncio
import heapq
import itertools
from collections.abc import Awaitable, Iterable


class VirtualClock:
    def __init__(self, start: float = 0.0) -> None:
        self.now = start
        self._sleepers: list[tuple[float, int, asyncio.Future[None]]] = []
        self._seq = itertools.count()  # equal wake times keep call order

    def __call__(self) -> float:
        return self.now

    async def sleep(self, seconds: float) -> None:
        future: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        heapq.heappush(self._sleepers, (self.now + max(0.0, seconds), next(self._seq), future))
        await future

    async def run_until_complete(self, aws: Iterable[Awaitable], settle_rounds: int = 20) -> list:
        """Run `aws` concurrently in virtual time; returns their results in order.

        Real waiting is not supported: after `settle_rounds` event-loop turns with nobody awake,
        the earliest sleeper is woken and the clock jumps to its time.
        """
        tasks = [asyncio.ensure_future(aw) for aw in aws]
        while not all(task.done() for task in tasks):
            for _ in range(settle_rounds):
                await asyncio.sleep(0)
            while self._sleepers and self._sleepers[0][2].cancelled():
                heapq.heappop(self._sleepers)
            if not self._sleepers:
                if all(task.done() for task in tasks):
                    break
                raise RuntimeError("virtual clock: tasks are blocked on something other than sleep")
            when, _, future = heapq.heappop(self._sleepers)
            self.now = max(self.now, when)
            future.set_result(None)
        return [task.result() for task in tasks]
