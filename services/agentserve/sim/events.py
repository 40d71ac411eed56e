"""The event core: virtual time and a heap of timed callbacks.

`EventLoop.at(t, fn)` runs `fn()` when virtual time reaches `t`; events at the same time run in the
order they were scheduled (a sequence number breaks ties), so a run is a pure function of its
inputs. Time only moves forward: scheduling before `now` is an error, not a silent reorder.
"""

from __future__ import annotations

import heapq
from collections.abc import Callable

Callback = Callable[[], None]


class EventLoop:
    def __init__(self) -> None:
        self._now = 0.0
        self._seq = 0
        self._heap: list[tuple[float, int, Callback]] = []
        self.events_run = 0

    def now(self) -> float:
        """Virtual seconds since the start (a clock for the scheduler's registry)."""
        return self._now

    def at(self, t: float, fn: Callback) -> None:
        if t < self._now:
            raise ValueError(f"event at {t} is before now ({self._now})")
        heapq.heappush(self._heap, (t, self._seq, fn))
        self._seq += 1

    def after(self, delay_s: float, fn: Callback) -> None:
        if delay_s < 0:
            raise ValueError(f"delay must be >= 0, got {delay_s}")
        self.at(self._now + delay_s, fn)

    def run(self, until: float | None = None) -> None:
        """Run events in time order until none is left (or the next is after `until`)."""
        while self._heap:
            t, _, fn = self._heap[0]
            if until is not None and t > until:
                self._now = until
                return
            heapq.heappop(self._heap)
            self._now = t
            self.events_run += 1
            fn()

    @property
    def pending(self) -> int:
        return len(self._heap)
