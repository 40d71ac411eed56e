"""`n` choices: one generation per choice, their events merged into one stream tagged by index.

Each choice is its own stateless completion of the same prompt (the engines' prefix cache shares
the prompt's KV among them). With a seed, choice i samples with seed + i: reproducible, yet the
choices differ.
"""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import AsyncGenerator, Callable
from contextlib import aclosing

from agentserve.contracts import SamplingParams
from agentserve.scheduler.http.core_api import TurnEventAPI

Tagged = tuple[int, TurnEventAPI]


def choice_sampling(sampling: SamplingParams, index: int) -> SamplingParams:
    if sampling.seed is None or index == 0:
        return sampling
    return dataclasses.replace(sampling, seed=(sampling.seed + index) % 2**63)


async def single(events: AsyncGenerator[TurnEventAPI, None]) -> AsyncGenerator[Tagged, None]:
    async with aclosing(events) as stream:
        async for event in stream:
            yield 0, event


async def merged(n: int, start: Callable[[int], AsyncGenerator[TurnEventAPI, None]]) -> AsyncGenerator[Tagged, None]:
    """The events of choices 0..n-1 (`start(i)` generates choice i) as they arrive.

    The first failure of any choice is raised here; closing this generator cancels every choice.
    """
    if n == 1:
        async with aclosing(single(start(0))) as one:
            async for tagged in one:
                yield tagged
        return
    queue: asyncio.Queue[Tagged | Exception | None] = asyncio.Queue()  # None: a choice ended

    async def pump(index: int) -> None:
        try:
            async with aclosing(start(index)) as events:
                async for event in events:
                    await queue.put((index, event))
        except Exception as exc:  # noqa: BLE001 - handed to the consumer, which raises it
            await queue.put(exc)
        await queue.put(None)

    tasks = [asyncio.create_task(pump(i), name=f"choice-{i}") for i in range(n)]
    try:
        running = n
        while running:
            item = await queue.get()
            if item is None:
                running -= 1
            elif isinstance(item, Exception):
                raise item
            else:
                yield item
    finally:
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
