"""LoadLanes: the order in which one prefill engine's loads use each way KV comes in.

A prefill engine's store reads all pass its storage NIC, and a path-B relay through a decode engine
passes that engine's NICs. `concurrent` (the default) starts every load at once: they share the NIC
chunk by chunk, each at a fraction of its rate. `fifo` gives each way in (the store, each relay
address) to one load at a time in arrival order: the oldest turn's KV arrives at the NIC's full rate
and it computes while the next one loads, as the scheduler's own ledger models a NIC
(`scheduler/nic_ledger.py`: a FIFO at its rate). The two ways still run at once, so a split read's
legs overlap.

The default is `concurrent` because `fifo` gains nothing measurable in `bench dualpath`
(docs/dualpath.md): its scheduler already spreads a turn's reads over the prefill's and the decode
engines' NICs, and a layerwise forward starts on layer 0 whichever order the loads take. `fifo`
stays selectable, so the bench can compare the two (`--load-order`).
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Literal

from agentserve.common.config import check_choice, choices_of

LoadOrder = Literal["fifo", "concurrent"]
LOAD_ORDERS = choices_of(LoadOrder)
DEFAULT_LOAD_ORDER: LoadOrder = "concurrent"


def check_load_order(name: str) -> str:
    check_choice("load_order", name, LoadOrder)
    return name


class LoadLanes:
    def __init__(self, order: str = DEFAULT_LOAD_ORDER) -> None:
        self.order = check_load_order(order)
        self._lanes: dict[str, asyncio.Lock] = {}

    @asynccontextmanager
    async def lane(self, way: str) -> AsyncIterator[None]:
        """Hold the way in named `way` ("store", or "relay <address>") for one load."""
        if self.order == "concurrent":
            yield
            return
        # asyncio.Lock wakes its waiters first come, first served: loads keep their arrival order.
        async with self._lanes.setdefault(way, asyncio.Lock()):
            yield
