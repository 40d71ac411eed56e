"""Bytes per second over a sliding window, for Stats."""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Callable


class RateMeter:
    """Counts bytes in one-second buckets; `rate()` is the mean over the last `window_s` seconds.
    Not thread-safe: the store updates it under its lock."""

    def __init__(self, window_s: int = 10, clock: Callable[[], float] = time.monotonic) -> None:
        self.window_s = window_s
        self.total = 0
        self._clock = clock
        self._buckets: deque[list[int]] = deque()  # [second, bytes], oldest first

    def add(self, nbytes: int) -> None:
        self.total += nbytes
        second = int(self._clock())
        if self._buckets and self._buckets[-1][0] == second:
            self._buckets[-1][1] += nbytes
        else:
            self._buckets.append([second, nbytes])
            self._trim(second)

    def rate(self) -> float:
        now = int(self._clock())
        self._trim(now)
        return sum(n for _, n in self._buckets) / self.window_s

    def _trim(self, now: int) -> None:
        while self._buckets and self._buckets[0][0] <= now - self.window_s:
            self._buckets.popleft()
