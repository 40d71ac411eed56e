"""NICs as bandwidth links in virtual time.

- `SharedLink`: every open transfer gets an equal share of the rate (processor sharing), as the
  node's storage NIC is shared by the transfers of its eight GPUs. A transfer of `n` bytes alone on
  a link of rate `r` ends `n / r` after it starts; `k` equal transfers started together all end
  `k * n / r` after. Shares are recomputed whenever a transfer opens or ends.

A transfer can also be watched part way (`when_moved`): a layerwise prefill needs to know when each
layer group of its load has arrived, and a load streamed in one transfer delivers its first `k`
bytes exactly when chunks of those bytes sent one after another would (the transfer is open
throughout), while the NIC's queue counts the whole load, as the emulated NIC's does
(`fabric/nic.py`: a transfer declares its bytes up front).

It counts the bytes moved and the time some transfer was open (busy), which the report turns
into utilisation per NIC.
"""

from __future__ import annotations

import heapq
import math
from collections.abc import Callable
from dataclasses import dataclass

from agentserve.sim.events import EventLoop

Done = Callable[[], None]
# Transfers within this of the least one end with it: float error over many rate changes, never a byte.
RESIDUE_BYTES = 1e-3
# A count is reached within this many of its float spacings: `start + n` rounds to the spacing of
# the link's count, which passes RESIDUE_BYTES once a busy link has served about 2**43 bytes.
COUNT_ULPS = 8


def slack(count: float) -> float:
    """Bytes within which a service count near `count` is reached: RESIDUE_BYTES, or a few float
    spacings of the count once those are coarser (past about 2**43 bytes)."""
    return max(RESIDUE_BYTES, COUNT_ULPS * math.ulp(count))


@dataclass
class Transfer:
    """One open (or finished) transfer on a link."""

    start: float  # the link's per-transfer service count when it opened
    nbytes: float
    on_done: Done
    owner: str
    done: bool = False

    @property
    def finish(self) -> float:
        """The link's per-transfer service count at which this transfer is done."""
        return self.start + self.nbytes


class SharedLink:
    """Processor sharing in O(log n) per event: `served` counts the bytes each open transfer has
    received since the link was made (every open one receives the same), so a transfer of `n`
    bytes opened when it read `s` ends when it reaches `s + n`; a heap orders transfers by that."""

    def __init__(self, loop: EventLoop, name: str, bytes_per_s: float) -> None:
        if not bytes_per_s > 0:
            raise ValueError(f"link {name}: bytes_per_s must be positive, got {bytes_per_s}")
        self.loop = loop
        self.name = name
        self.bytes_per_s = bytes_per_s
        self.bytes_total = 0.0
        self.busy_s = 0.0
        self._served = 0.0
        self._heap: list[tuple[float, int, Transfer]] = []
        self._marks: list[tuple[float, int, Done]] = []  # (service count, id, callback): `when_moved`
        self._next_id = 0
        self._updated = 0.0
        self._generation = 0  # bumps on every reshare: a completion scheduled before one is stale
        self._owner_finish: dict[str, float] = {}  # by owner: the sum of its open transfers' `finish`
        self._owner_open: dict[str, int] = {}

    @property
    def queue_bytes(self) -> int:
        """Bytes of open transfers not yet moved, as of now."""
        self._advance()
        return round(sum(f.finish for _, _, f in self._heap) - len(self._heap) * self._served)

    def queue_bytes_of(self, owner: str) -> int:
        """Bytes of `owner`'s open transfers not yet moved (an engine's share of a node's NIC)."""
        self._advance()
        left = self._owner_finish.get(owner, 0.0) - self._owner_open.get(owner, 0) * self._served
        return max(0, round(left))

    def send(self, nbytes: float, on_done: Done, owner: str = "") -> Transfer:
        """Open a transfer of `nbytes` for `owner`; `on_done()` runs when its last byte is moved."""
        if nbytes < 0:
            raise ValueError(f"link {self.name}: nbytes must be >= 0, got {nbytes}")
        self.bytes_total += nbytes
        if nbytes == 0:
            self.loop.after(0.0, on_done)
            return Transfer(self._served, 0.0, on_done, owner, done=True)
        self._advance()
        flow = Transfer(self._served, nbytes, on_done, owner)
        heapq.heappush(self._heap, (flow.finish, self._next_id, flow))
        self._next_id += 1
        self._owner_finish[owner] = self._owner_finish.get(owner, 0.0) + flow.finish
        self._owner_open[owner] = self._owner_open.get(owner, 0) + 1
        self._reschedule()
        return flow

    def moved(self, transfer: Transfer) -> float:
        """Bytes of `transfer` moved so far."""
        if transfer.done:
            return transfer.nbytes
        self._advance()
        return min(transfer.nbytes, self._served - transfer.start)

    def has_moved(self, transfer: Transfer, nbytes: float) -> bool:
        """Whether `nbytes` of `transfer` are moved, within float error of the link's count: true
        whenever a `when_moved(transfer, nbytes, ...)` callback runs."""
        return self.moved(transfer) >= nbytes - slack(self._served)

    def when_moved(self, transfer: Transfer, nbytes: float, callback: Done) -> None:
        """Run `callback()` once `nbytes` of `transfer` are moved (as an event now, if they are; a
        point at or past its end, with its end)."""
        if self.has_moved(transfer, nbytes):
            self.loop.after(0.0, callback)
            return
        heapq.heappush(self._marks, (transfer.start + min(nbytes, transfer.nbytes), self._next_id, callback))
        self._next_id += 1
        self._reschedule()

    def _advance(self) -> None:
        now = self.loop.now()
        elapsed = now - self._updated
        self._updated = now
        if elapsed <= 0 or not self._heap:
            return
        self.busy_s += elapsed
        self._served += elapsed * self.bytes_per_s / len(self._heap)

    def _next_count(self) -> float:
        """The service count of the next transfer's end or watched point."""
        return min(self._heap[0][0], self._marks[0][0]) if self._marks else self._heap[0][0]

    def _reschedule(self) -> None:
        self._generation += 1
        if not self._heap:
            return
        generation = self._generation
        delay = max(0.0, self._next_count() - self._served) * len(self._heap) / self.bytes_per_s
        self.loop.after(delay, lambda: self._complete(generation))

    def _complete(self, generation: int) -> None:
        if generation != self._generation:
            return
        self._advance()
        # This event is the first transfer's end (or watched point) by construction; comparing with
        # it, not with the count, keeps float error (an end time that rounds to now) from
        # rescheduling it for ever.
        least = self._next_count()
        reached = least + slack(least)
        callbacks = []
        while self._marks and self._marks[0][0] <= reached:
            callbacks.append(heapq.heappop(self._marks)[2])
        while self._heap and self._heap[0][0] <= reached:
            flow = heapq.heappop(self._heap)[2]
            flow.done = True
            self._owner_open[flow.owner] -= 1
            self._owner_finish[flow.owner] -= flow.finish
            if not self._owner_open[flow.owner]:
                del self._owner_open[flow.owner], self._owner_finish[flow.owner]
            callbacks.append(flow.on_done)
        self._served = max(self._served, least)
        self._reschedule()
        for callback in callbacks:
            callback()
