"""NICLedger: the scheduler's own account of the reads it routed to one engine NIC.

A heartbeat reports a NIC's queue but lags by up to an interval, and a read routed a moment ago is
in no report yet. So for each NIC of each engine the scheduler keeps, from what it routed itself:

- `held`: bytes of reads routed here whose turn has not returned. A read cannot still be waiting
  once its prefill returned, so this bounds the backlog from above.
- the backlog: the NIC as a FIFO at its configured rate. Routing `n` bytes at time `t` moves the
  time it is free to `max(free_at, t) + n / rate`; the backlog at `now` is `(free_at - now) * rate`,
  at most `held`. A read stops counting once the NIC would have moved it, not when its turn's
  compute ends: a prefill engine whose reads are done but that is still computing has an idle
  storage NIC, which is what path choice must see. An unshaped NIC has no rate to drain at, so
  what it holds stands.
- `recent`: bytes routed here (reads, and the writes a turn will make, `note_write`), halved every
  `RECENT_HALF_LIFE_S`: the load this NIC carried lately. Policies break ties between equally
  queued NICs by it (least recently loaded first). Queues are mostly empty when a turn is placed at
  low load, so without it every tie would go the same way (path A, the turn's decode engine) and
  the storage NICs would carry very unequal shares.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

# Long enough to span many placements (a turn's read takes well under a second on the target), so
# ties even out the bytes each NIC carries; short enough that an engine that joins late is not
# handed every tie for long.
RECENT_HALF_LIFE_S = 60.0


@dataclass
class NICLedger:
    held: int = 0
    free_at: float = 0.0  # when the NIC would have moved every byte routed to it (monotonic clock)
    recent: float = 0.0  # decayed bytes routed, as of `recent_at`
    recent_at: float = 0.0

    def route(self, nbytes: int, bytes_per_s: float, now: float) -> None:
        """Count `nbytes` routed to this NIC at `now` (until `release`)."""
        if nbytes <= 0:
            return
        self.held += nbytes
        drain_s = nbytes / bytes_per_s if math.isfinite(bytes_per_s) else 0.0
        self.free_at = max(self.free_at, now) + drain_s
        self.recent = self.recent_bytes(now) + nbytes
        self.recent_at = now

    def note_write(self, nbytes: int, now: float) -> None:
        """Count `nbytes` a turn will write over this NIC (its prefill persisting the blocks it
        computed) in the recent load only: the write follows the turn's compute, so it is no read
        waiting now."""
        if nbytes > 0:
            self.recent = self.recent_bytes(now) + nbytes
            self.recent_at = now

    def release(self, nbytes: int, now: float) -> None:
        """The turn that routed `nbytes` here returned: none of them can still be waiting."""
        if nbytes <= 0:
            return
        self.held -= nbytes
        if self.held == 0:
            # Reads that finished early must not delay the next one's modelled start.
            self.free_at = min(self.free_at, now)

    def backlog(self, bytes_per_s: float, now: float) -> int:
        """Bytes routed here the NIC would not have moved yet by `now`."""
        if not math.isfinite(bytes_per_s):
            return self.held
        return min(self.held, max(0, round((self.free_at - now) * bytes_per_s)))

    def recent_bytes(self, now: float) -> float:
        """Bytes routed here, each halved for every `RECENT_HALF_LIFE_S` since it was routed."""
        if self.recent == 0.0:
            return 0.0
        return self.recent * 0.5 ** (max(0.0, now - self.recent_at) / RECENT_HALF_LIFE_S)
