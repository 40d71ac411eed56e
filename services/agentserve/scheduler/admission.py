"""Admission: whether a new turn may start now, under the scheduler's load bounds.

Three bounds, checked before any work is done, so overload is answered at once with 429 /
RESOURCE_EXHAUSTED and a `Retry-After` instead of queueing into minutes of latency:
- turns in flight, all tenants together (`max_inflight`): what the engines can make progress on;
- turns in flight per tenant (`max_inflight_per_tenant`): one tenant cannot take all of them;
- a token bucket per tenant (`turns_per_s`, `burst`): the rate of new turns a tenant may start.

Check, then act: the in-flight bounds are checked before a rate token is taken, so a refused turn
costs its tenant nothing. A `Ticket` is held for the turn's life and released exactly once.
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass

from agentserve.common.errors import Overloaded

Clock = Callable[[], float]
# With a bound full, when to try again: a turn of the tiny model takes a fraction of a second.
BUSY_RETRY_S = 1.0
# Buckets of idle tenants (full again) are dropped past this many, so claimed tenants cannot grow
# the table without bound when keys are off.
MAX_IDLE_BUCKETS = 10_000


@dataclass(frozen=True)
class AdmissionLimits:
    max_inflight: int = 256  # 0 = unbounded
    max_inflight_per_tenant: int = 128  # 0 = unbounded
    turns_per_s: float = 0.0  # per tenant; 0 = no rate limit
    burst: int = 32

    def __post_init__(self) -> None:
        if self.max_inflight < 0 or self.max_inflight_per_tenant < 0:
            raise ValueError("in-flight bounds must be >= 0 (0 = unbounded)")
        if self.turns_per_s < 0:
            raise ValueError(f"turns_per_s must be >= 0 (0 = no rate limit), got {self.turns_per_s}")
        if self.burst < 1:
            raise ValueError(f"burst must be at least 1, got {self.burst}")


class RateBucket:
    """`rate` tokens a second up to `burst`; a take that finds less than one token is refused."""

    def __init__(self, rate: float, burst: int, now: float) -> None:
        self.rate = rate
        self.burst = float(burst)
        self._level = float(burst)
        self._stamp = now

    def take(self, now: float) -> float:
        """0.0 if a token was taken, else the seconds until one will be there."""
        self._level = min(self.burst, self._level + (now - self._stamp) * self.rate)
        self._stamp = now
        if self._level >= 1.0:
            self._level -= 1.0
            return 0.0
        return (1.0 - self._level) / self.rate

    def full(self, now: float) -> bool:
        return self._level + (now - self._stamp) * self.rate >= self.burst


class Ticket:
    """One admitted turn; `release` (idempotent) when it ends, however it ends."""

    def __init__(self, admission: Admission, tenant: str) -> None:
        self._admission = admission
        self.tenant = tenant
        self._held = True

    def release(self) -> None:
        if self._held:
            self._held = False
            self._admission._release(self.tenant)


class Admission:
    def __init__(self, limits: AdmissionLimits = AdmissionLimits(), clock: Clock = time.monotonic) -> None:
        self.limits = limits
        self._clock = clock
        self.inflight = 0
        self._per_tenant: Counter[str] = Counter()
        self._buckets: dict[str, RateBucket] = {}

    def inflight_of(self, tenant: str) -> int:
        return self._per_tenant[tenant]

    def admit(self, tenant: str) -> Ticket:
        """A ticket for a new turn of `tenant`; Overloaded (with when to retry) past a bound."""
        limits = self.limits
        if limits.max_inflight and self.inflight >= limits.max_inflight:
            raise Overloaded(
                f"the scheduler is at its limit of {limits.max_inflight} turns in flight; retry later",
                BUSY_RETRY_S,
            )
        if limits.max_inflight_per_tenant and self._per_tenant[tenant] >= limits.max_inflight_per_tenant:
            raise Overloaded(
                f"tenant {tenant!r} is at its limit of {limits.max_inflight_per_tenant} turns in flight; retry later",
                BUSY_RETRY_S,
            )
        if limits.turns_per_s:
            now = self._clock()
            bucket = self._buckets.get(tenant)
            if bucket is None:
                self._prune(now)
                bucket = self._buckets[tenant] = RateBucket(limits.turns_per_s, limits.burst, now)
            wait_s = bucket.take(now)
            if wait_s:
                raise Overloaded(
                    f"tenant {tenant!r} is over its rate of {limits.turns_per_s:g} turns/s (burst {limits.burst})",
                    wait_s,
                )
        self.inflight += 1
        self._per_tenant[tenant] += 1
        return Ticket(self, tenant)

    def _release(self, tenant: str) -> None:
        self.inflight -= 1
        self._per_tenant[tenant] -= 1
        if not self._per_tenant[tenant]:
            del self._per_tenant[tenant]

    def _prune(self, now: float) -> None:
        if len(self._buckets) >= MAX_IDLE_BUCKETS:
            self._buckets = {t: b for t, b in self._buckets.items() if not b.full(now)}
