"""NICs as bandwidth links in virtual time.

- `SharedLink`: every open transfer gets an equal share of the rate (processor sharing), as the
  node's storage NIC is shared by the transfers of its eight GPUs. A transfer of `n` bytes alone on
  a link of rate `r` ends `n / r` after it starts; `k` equal transfers started together all end
  `k * n / r` after. Shares are recomputed whenever a transfer opens or ends.

It counts the bytes moved and the time some transfer was open (busy), which the report turns
into utilisation per NIC.
"""

from __future__ import annotations

import heapq
from collections.abc import Callable
from dataclasses import dataclass

from agentserve.sim.events import EventLoop

Done = Callable[[], None]
# Transfers within this of the least one end with it: float error over many rate changes, never a byte.
_RESIDUE_BYTES = 1e-3


@dataclass(frozen=True)
class _Flow:
    finish: float  # the link's per-transfer service count at which this transfer is done
    on_done: Done
    owner: str


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
        self._heap: list[tuple[float, int, _Flow]] = []
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

    def send(self, nbytes: float, on_done: Done, owner: str = "") -> None:
        """Open a transfer of `nbytes` for `owner`; `on_done()` runs when its last byte is moved."""
        if nbytes < 0:
            raise ValueError(f"link {self.name}: nbytes must be >= 0, got {nbytes}")
        self.bytes_total += nbytes
        if nbytes == 0:
            self.loop.after(0.0, on_done)
            return
        self._advance()
        flow = _Flow(self._served + nbytes, on_done, owner)
        heapq.heappush(self._heap, (flow.finish, self._next_id, flow))
        self._next_id += 1
        self._owner_finish[owner] = self._owner_finish.get(owner, 0.0) + flow.finish
        self._owner_open[owner] = self._owner_open.get(owner, 0) + 1
        self._reschedule()

    def _advance(self) -> None:
        now = self.loop.now()
        elapsed = now - self._updated
        self._updated = now
        if elapsed <= 0 or not self._heap:
            return
        self.busy_s += elapsed
        self._served += elapsed * self.bytes_per_s / len(self._heap)

    def _reschedule(self) -> None:
        self._generation += 1
        if not self._heap:
            return
        generation = self._generation
        delay = max(0.0, self._heap[0][0] - self._served) * len(self._heap) / self.bytes_per_s
        self.loop.after(delay, lambda: self._complete(generation))

    def _complete(self, generation: int) -> None:
        if generation != self._generation:
            return
        self._advance()
        # This event is the first transfer's end by construction; comparing with it, not with the
        # count, keeps float error (an end time that rounds to now) from rescheduling it for ever.
        least = self._heap[0][0]
        callbacks = []
        while self._heap and self._heap[0][0] <= least + _RESIDUE_BYTES:
            flow = heapq.heappop(self._heap)[2]
            self._owner_open[flow.owner] -= 1
            self._owner_finish[flow.owner] -= flow.finish
            if not self._owner_open[flow.owner]:
                del self._owner_open[flow.owner], self._owner_finish[flow.owner]
            callbacks.append(flow.on_done)
        self._served = max(self._served, least)
        self._reschedule()
        for callback in callbacks:
            callback()
