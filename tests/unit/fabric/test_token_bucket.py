"""TokenBucket: exact pacing in virtual time, FIFO among waiters, refunds, validation."""

from __future__ import annotations

import asyncio

import pytest

from agentserve.fabric.token_bucket import TokenBucket
from agentserve.fabric.virtual_time import VirtualClock

pytestmark = pytest.mark.unit


def run(clock: VirtualClock, *aws):
    return asyncio.run(clock.run_until_complete(aws))


def test_starts_full_then_paces_at_rate():
    clock = VirtualClock()
    bucket = TokenBucket(rate=1000, burst=500, clock=clock)
    assert bucket.reserve(500) == 0.0
    assert bucket.reserve(250) == pytest.approx(0.25)
    assert bucket.reserve(250) == pytest.approx(0.5)  # queued behind the first reservation
    clock.now = 0.5
    assert bucket.level() == pytest.approx(0.0)


def test_long_run_rate_is_exact():
    clock = VirtualClock()
    bucket = TokenBucket(rate=1_000_000, burst=10_000, clock=clock, sleep=clock.sleep)

    async def send(n_chunks: int, chunk: int) -> float:
        for _ in range(n_chunks):
            await bucket.acquire(chunk)
        return clock()

    (end,) = run(clock, send(1000, 5_000))
    # 5 MB at 1 MB/s, of which the first 10 kB ride on the initial burst
    assert end == pytest.approx((5_000_000 - 10_000) / 1_000_000)


def test_concurrent_waiters_are_served_in_order_and_share_equally():
    clock = VirtualClock()
    bucket = TokenBucket(rate=1000, burst=100, clock=clock, sleep=clock.sleep)
    finished: list[tuple[str, float]] = []

    async def stream(name: str, chunks: int) -> None:
        for _ in range(chunks):
            await bucket.acquire(100)
            await asyncio.sleep(0)  # the send: lets the others queue their next chunk
        finished.append((name, clock()))

    run(clock, stream("a", 10), stream("b", 10), stream("c", 10))
    # 3000 bytes, 100 free: the streams alternate chunk by chunk and end one chunk time apart
    assert finished == [("a", pytest.approx(2.7)), ("b", pytest.approx(2.8)), ("c", pytest.approx(2.9))]


def test_idle_refill_caps_at_burst():
    clock = VirtualClock()
    bucket = TokenBucket(rate=1000, burst=200, clock=clock)
    bucket.reserve(200)
    clock.now = 100.0
    assert bucket.level() == 200
    assert bucket.reserve(300) == pytest.approx(0.1)


def test_late_wakeup_does_not_lower_the_rate():
    clock = VirtualClock()
    bucket = TokenBucket(rate=1000, burst=300, clock=clock)
    bucket.reserve(300)
    delay = bucket.reserve(100)
    clock.now = delay + 0.05  # woke 50 ms late: those 50 tokens are still there
    assert bucket.reserve(100) == pytest.approx(0.05)


def test_cancelled_waiter_refunds_and_releases_waiting_bytes():
    clock = VirtualClock()
    bucket = TokenBucket(rate=1000, burst=100, clock=clock, sleep=clock.sleep)

    async def scenario() -> float:
        bucket.reserve(100)
        waiter = asyncio.ensure_future(bucket.acquire(500))
        await asyncio.sleep(0)
        assert bucket.waiting_bytes == 500
        waiter.cancel()
        with pytest.raises(asyncio.CancelledError):
            await waiter
        return bucket.level()

    assert asyncio.run(scenario()) == pytest.approx(0.0)
    assert bucket.waiting_bytes == 0


@pytest.mark.parametrize("rate, burst", [(0, 10), (-1, 10), (10, 0)])
def test_rejects_non_positive_settings(rate, burst):
    with pytest.raises(ValueError, match="must be positive"):
        TokenBucket(rate, burst)


def test_rejects_negative_reservation():
    with pytest.raises(ValueError, match="negative"):
        TokenBucket(10, 10).reserve(-1)
