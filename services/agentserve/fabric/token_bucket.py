"""An asyncio token bucket that paces bytes at a configured rate.

It works by reservation: `reserve(n)` takes n tokens at once, letting the level go negative (debt),
and returns how long until the debt is repaid; `acquire(n)` sleeps that long, after which the
caller sends. Every reservation queues behind all earlier ones, so concurrent waiters are served
first come, first served, and streams that alternate chunk by chunk get equal shares of the rate
(equal bytes when their chunks are equal). The level comes from the clock, not from when sleepers
wake up, so a late wake-up does not lower the long-run rate: the bucket refills in the meantime,
up to `burst`. Over any window of T seconds at most `rate * T + burst` bytes are let through.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable

Clock = Callable[[], float]
Sleep = Callable[[float], Awaitable[None]]


class TokenBucket:
    def __init__(self, rate: float, burst: float, clock: Clock = time.monotonic, sleep: Sleep = asyncio.sleep) -> None:
        """`rate` in bytes/s, `burst` in bytes (the bucket starts full); `clock` is monotonic seconds."""
        if not rate > 0:
            raise ValueError(f"token bucket rate must be positive, got {rate!r}")
        if not burst > 0:
            raise ValueError(f"token bucket burst must be positive, got {burst!r}")
        self.rate = float(rate)
        self.burst = float(burst)
        self._clock = clock
        self._sleep = sleep
        self._level = self.burst
        self._stamp = clock()
        self.waiting_bytes = 0  # reserved by acquire() calls still asleep

    def level(self) -> float:
        """Tokens available now; negative while reservations are outstanding."""
        self._refill()
        return self._level

    def set_burst(self, burst: float) -> None:
        """Change the cap from now on; tokens gathered so far count at the old cap."""
        if not burst > 0:
            raise ValueError(f"token bucket burst must be positive, got {burst!r}")
        self._refill()
        self.burst = float(burst)
        self._level = min(self._level, self.burst)

    def reserve(self, nbytes: int) -> float:
        """Take `nbytes` tokens now; return the seconds until they are covered (0: send at once)."""
        if nbytes < 0:
            raise ValueError(f"cannot reserve a negative byte count ({nbytes})")
        self._refill()
        self._level -= nbytes
        return -self._level / self.rate if self._level < 0 else 0.0

    def refund(self, nbytes: int) -> None:
        """Give back tokens of a reservation that will not be sent (e.g. a cancelled waiter)."""
        self._refill()
        self._level = min(self.burst, self._level + nbytes)

    async def acquire(self, nbytes: int) -> float:
        """Wait until `nbytes` may be sent; returns the seconds waited. Cancelling refunds them."""
        delay = self.reserve(nbytes)
        if delay <= 0:
            return 0.0
        self.waiting_bytes += nbytes
        try:
            await self._sleep(delay)
        except asyncio.CancelledError:
            self.refund(nbytes)
            raise
        finally:
            self.waiting_bytes -= nbytes
        return delay

    def _refill(self) -> None:
        now = self._clock()
        if now > self._stamp:
            self._level = min(self.burst, self._level + (now - self._stamp) * self.rate)
            self._stamp = now
