"""NICs as bandwidth links in virtual time.

- `SharedLink`: every open transfer gets an equal share of the rate (processor sharing), as the
  node's storage NIC is shared by the transfers of its eight GPUs. A transfer of `n` bytes alone on
  a link of rate `r` ends `n / r` after it starts; `k` equal transfers started together all end
  `k * n / r` after. Shares are recomputed whenever a transfer opens or ends.
- `FifoLink`: transfers one after another in the order sent, each at the full rate.

Both count the bytes moved and the time some transfer was open (busy), which the report turns
into utilisation per NIC.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from agentserve.sim.events import EventLoop

Done = Callable[[], None]
# Transfers within this of the least one end with it: float error over many rate changes, never a byte.
_RESIDUE_BYTES = 1e-3


@dataclass
class _Flow:
    remaining: float
    on_done: Done
    owner: str


class SharedLink:
    def __init__(self, loop: EventLoop, name: str, bytes_per_s: float) -> None:
        if not bytes_per_s > 0:
            raise ValueError(f"link {name}: bytes_per_s must be positive, got {bytes_per_s}")
        self.loop = loop
        self.name = name
        self.bytes_per_s = bytes_per_s
        self.bytes_total = 0.0
        self.busy_s = 0.0
        self._flows: dict[int, _Flow] = {}
        self._next_id = 0
        self._updated = 0.0
        self._generation = 0  # bumps on every reshare: a completion scheduled before one is stale

    @property
    def open_transfers(self) -> int:
        return len(self._flows)

    @property
    def queue_bytes(self) -> int:
        """Bytes of open transfers not yet moved, as of now."""
        self._advance()
        return round(sum(f.remaining for f in self._flows.values()))

    def queue_bytes_of(self, owner: str) -> int:
        """Bytes of `owner`'s open transfers not yet moved (an engine's share of a node's NIC)."""
        self._advance()
        return round(sum(f.remaining for f in self._flows.values() if f.owner == owner))

    def send(self, nbytes: float, on_done: Done, owner: str = "") -> None:
        """Open a transfer of `nbytes` for `owner`; `on_done()` runs when its last byte is moved."""
        if nbytes < 0:
            raise ValueError(f"link {self.name}: nbytes must be >= 0, got {nbytes}")
        self.bytes_total += nbytes
        if nbytes == 0:
            self.loop.after(0.0, on_done)
            return
        self._advance()
        self._flows[self._next_id] = _Flow(float(nbytes), on_done, owner)
        self._next_id += 1
        self._reschedule()

    def _advance(self) -> None:
        now = self.loop.now()
        elapsed = now - self._updated
        self._updated = now
        if elapsed <= 0 or not self._flows:
            return
        self.busy_s += elapsed
        moved = elapsed * self.bytes_per_s / len(self._flows)
        for flow in self._flows.values():
            flow.remaining -= moved

    def _reschedule(self) -> None:
        self._generation += 1
        if not self._flows:
            return
        least = min(f.remaining for f in self._flows.values())
        generation = self._generation
        delay = max(0.0, least) * len(self._flows) / self.bytes_per_s
        self.loop.after(delay, lambda: self._complete(generation))

    def _complete(self, generation: int) -> None:
        if generation != self._generation:
            return
        self._advance()
        # This event is the least transfer's end by construction; comparing with it, not with 0,
        # keeps float error (an end time that rounds to now) from rescheduling it for ever.
        least = min(f.remaining for f in self._flows.values())
        done = [i for i, f in self._flows.items() if f.remaining <= least + _RESIDUE_BYTES]
        callbacks = [self._flows.pop(i).on_done for i in done]
        self._reschedule()
        for callback in callbacks:
            callback()


class FifoLink:
    def __init__(self, loop: EventLoop, name: str, bytes_per_s: float) -> None:
        if not bytes_per_s > 0:
            raise ValueError(f"link {name}: bytes_per_s must be positive, got {bytes_per_s}")
        self.loop = loop
        self.name = name
        self.bytes_per_s = bytes_per_s
        self.bytes_total = 0.0
        self.busy_s = 0.0
        self._free_at = 0.0

    @property
    def queue_bytes(self) -> int:
        return round(max(0.0, self._free_at - self.loop.now()) * self.bytes_per_s)

    def send(self, nbytes: float, on_done: Done, owner: str = "") -> None:
        if nbytes < 0:
            raise ValueError(f"link {self.name}: nbytes must be >= 0, got {nbytes}")
        duration = nbytes / self.bytes_per_s
        self._free_at = max(self._free_at, self.loop.now()) + duration
        self.bytes_total += nbytes
        self.busy_s += duration
        self.loop.at(self._free_at, on_done)


Link = SharedLink | FifoLink
