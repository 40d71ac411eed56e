"""Admission: whether a new turn may start now, wait its tenant's fair turn, or is refused.

Bounds, checked before any work is done, so overload is answered at once with 429 /
RESOURCE_EXHAUSTED and a `Retry-After` instead of queueing into minutes of latency:
- turns held, running and waiting, all tenants together (`max_inflight`);
- turns held per tenant (`max_inflight_per_tenant`): one tenant cannot take all of them;
- a token bucket per tenant (`turns_per_s`, `burst`): the rate of new turns a tenant may start.

Of the turns held, `max_running` run on the engines at once; the others wait in a `TurnQueue`
(`fair_queue.py`) and each freed slot goes to the turn it names: by default weighted fair
queuing across tenants, so a tenant under its share waits for one slot, not behind another
tenant's backlog. With every place held, the queue names whose newest waiting turn gives way to
the arriving one (wfq: the tenant with the most waiting turns per unit of weight), so a flooding
tenant is refused before others wait.

Check, then act: the bounds are checked before a rate token is taken, so a turn refused at the door
costs its tenant nothing, and one pushed out of the queue gets its token back. A `Ticket` is held
for the turn's life and released exactly once.
"""

from __future__ import annotations

import asyncio
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass

from agentserve.common.errors import Overloaded
from agentserve.scheduler.fair_queue import TurnQueue, WeightedFairQueue

Clock = Callable[[], float]
# With a bound full, when to try again: a turn of the tiny model takes a fraction of a second.
BUSY_RETRY_S = 1.0
# Buckets of idle tenants (full again) are dropped past this many, so claimed tenants cannot grow
# the table without bound when keys are off.
MAX_IDLE_BUCKETS = 10_000


@dataclass(frozen=True)
class AdmissionLimits:
    max_inflight: int = 256  # running and waiting; 0 = unbounded
    max_inflight_per_tenant: int = 128  # 0 = unbounded
    turns_per_s: float = 0.0  # per tenant; 0 = no rate limit
    burst: int = 32
    max_running: int = 0  # on the engines at once, the rest wait in the queue; 0 = unbounded

    def __post_init__(self) -> None:
        if self.max_inflight < 0 or self.max_inflight_per_tenant < 0 or self.max_running < 0:
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

    def refund(self) -> None:
        self._level = min(self.burst, self._level + 1.0)

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


class _Waiter:
    """A turn in the queue: its future resolves when it may run (or fails when it is shed)."""

    def __init__(self, tenant: str) -> None:
        self.tenant = tenant
        self.future: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self.state = "waiting"  # -> granted | shed


class Admission:
    """Runs on the scheduler's event loop; `admit` waits only while its turn is queued."""

    def __init__(
        self,
        limits: AdmissionLimits = AdmissionLimits(),
        clock: Clock = time.monotonic,
        queue: TurnQueue | None = None,
    ) -> None:
        self.limits = limits
        self._clock = clock
        self.queue: TurnQueue = queue if queue is not None else WeightedFairQueue()
        self.inflight = 0  # running and waiting
        self.running = 0
        self._per_tenant: Counter[str] = Counter()
        self._buckets: dict[str, RateBucket] = {}

    def inflight_of(self, tenant: str) -> int:
        return self._per_tenant[tenant]

    async def admit(self, tenant: str) -> Ticket:
        """A ticket for a new turn of `tenant`, once a running slot is its; Overloaded (with when
        to retry) past a bound, or when a turn of a tenant under its share takes its place."""
        self._check(tenant)
        self.inflight += 1
        self._per_tenant[tenant] += 1
        if self._may_run() and not len(self.queue):
            self.running += 1
            return Ticket(self, tenant)
        waiter = _Waiter(tenant)
        self.queue.push(tenant, waiter)
        try:
            await waiter.future
        except asyncio.CancelledError:
            if waiter.state == "granted":
                self._release(tenant)
            elif waiter.state == "waiting":
                self.queue.remove(tenant, waiter)
                self._forget(tenant)
            raise
        return Ticket(self, tenant)

    def _check(self, tenant: str) -> None:
        """Raise Overloaded if a bound refuses a turn of `tenant`; room made by shedding counts."""
        limits = self.limits
        if limits.max_inflight_per_tenant and self._per_tenant[tenant] >= limits.max_inflight_per_tenant:
            raise Overloaded(
                f"tenant {tenant!r} is at its limit of {limits.max_inflight_per_tenant} turns in flight; retry later",
                BUSY_RETRY_S,
            )
        full = bool(limits.max_inflight) and self.inflight >= limits.max_inflight
        victim = self.queue.shed(tenant) if full and len(self.queue) else tenant
        if full and victim == tenant:
            raise Overloaded(
                f"the scheduler is at its limit of {limits.max_inflight} turns in flight; retry later",
                BUSY_RETRY_S,
            )
        if limits.turns_per_s:
            self._take_token(tenant)
        if full:
            self._shed(victim)

    def _take_token(self, tenant: str) -> None:
        limits = self.limits
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

    def _shed(self, victim: str) -> None:
        waiter: _Waiter = self.queue.newest(victim)
        self.queue.remove(victim, waiter)
        waiter.state = "shed"
        self._forget(victim)
        bucket = self._buckets.get(victim)
        if bucket is not None:
            bucket.refund()
        if waiter.future.done():  # cancelled, its task not yet resumed: nobody reads the refusal
            return
        waiter.future.set_exception(
            Overloaded(
                f"tenant {victim!r} holds the most waiting turns for its weight and the scheduler is at its "
                f"limit of {self.limits.max_inflight} turns; another tenant's turn took this one's place; retry later",
                BUSY_RETRY_S,
            )
        )

    def _may_run(self) -> bool:
        return not self.limits.max_running or self.running < self.limits.max_running

    def _release(self, tenant: str) -> None:
        self.running -= 1
        self._forget(tenant)
        while self._may_run() and len(self.queue):
            waiter: _Waiter = self.queue.pop()
            if waiter.future.done():  # cancelled: its task withdraws it
                continue
            waiter.state = "granted"
            self.running += 1
            waiter.future.set_result(None)

    def _forget(self, tenant: str) -> None:
        self.inflight -= 1
        self._per_tenant[tenant] -= 1
        if not self._per_tenant[tenant]:
            del self._per_tenant[tenant]

    def _prune(self, now: float) -> None:
        if len(self._buckets) >= MAX_IDLE_BUCKETS:
            self._buckets = {t: b for t, b in self._buckets.items() if not b.full(now)}
