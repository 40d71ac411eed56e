"""LoadLanes: the order in which one prefill engine's loads use each way KV comes in.

A prefill engine's store reads all pass its storage NIC, and a path-B relay through a decode engine
passes that engine's NICs. Started together, several turns' loads share a NIC chunk by chunk, so
each arrives at a fraction of the rate: the oldest turn's KV could be complete only about when the
last one's is, and a layerwise forward would wait on layers a lone load had already delivered.
That was the premise; the measurement below did not bear it out.

`fifo` gives each way in (the store, each relay address) to one load at a time in arrival order:
the oldest turn's KV arrives at the NIC's full rate and it computes while the next one loads, which
is how an engine that reads its next batch during the current one's compute pipelines (and how the
scheduler's own ledger, `scheduler/nic_ledger.py`, models a NIC: a FIFO at its rate). The two ways
still run at once, so a split read's legs overlap. `concurrent` (the default): every load starts at
once and shares the NIC.

Measured side by side (`bench dualpath --policies layerwise,dualpath --agents 8 --turns 12
--first-context 28160 --shared-prefix 24064 --no-online --no-floor --load-order fifo|concurrent`,
2 Dec 11:48-11:58 UTC): layerwise JCT 162.2 s fifo / 159.1 s concurrent, dualpath 137.9 / 132.2 s,
dualpath's prefill engines computing 0.84-0.87 / 0.89-0.90 of the run, layer waits 0.03-0.04 /
0.03. No gain: dualpath's scheduler already spreads a turn's reads over the prefill's and the decode
engines' NICs, and a layerwise forward starts on layer 0 whichever order the loads take. Again at
the default workload (`--policies dualpath --no-online --no-floor --load-order fifo|concurrent`,
two invocations at once, 2 Dec 14:42 UTC): dualpath 279.6 s fifo / 290.0 s concurrent, the other
way round and by as much as one dualpath run moves between runs. So the default stays
`concurrent`; `fifo` is kept as a selectable order.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

LOAD_ORDERS = ("fifo", "concurrent")
DEFAULT_LOAD_ORDER = "concurrent"


def check_load_order(name: str) -> str:
    if name not in LOAD_ORDERS:
        raise ValueError(f"load_order must be one of {', '.join(LOAD_ORDERS)}, got {name!r}")
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
