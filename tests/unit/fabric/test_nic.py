"""EmulatedNIC, Link and Transfer in virtual time: rate, latency once, both ends, queue depth, states."""

from __future__ import annotations

import asyncio

import pytest

from agentserve.fabric.nic import EmulatedNIC, Link, TransferState, transfer_pace
from agentserve.fabric.virtual_time import VirtualClock

pytestmark = pytest.mark.unit

MB = 1_000_000


def nic(clock: VirtualClock, name: str, gbps: float, latency_ms: float = 0.0, burst_ms: float = 1.0) -> EmulatedNIC:
    return EmulatedNIC(name, gbps, latency_ms, burst_ms=burst_ms, clock=clock, sleep=clock.sleep)


def run(clock: VirtualClock, *aws):
    return asyncio.run(clock.run_until_complete(aws))


async def stream(transfer_factory, total: int, chunk: int, clock: VirtualClock):
    async with transfer_factory(total) as t:
        for _ in range(total // chunk):
            await t.pace(chunk)
            await asyncio.sleep(0)
    return t, clock()


def test_unshaped_nic_never_waits_but_counts():
    clock = VirtualClock()
    a = nic(clock, "snic", 0)
    (wait,) = run(clock, a.transmit(5 * MB))
    stats = a.stats()
    assert (wait, clock.now, stats.bytes_total, stats.transfers_total, stats.busy_s_total) == (0.0, 0.0, 5 * MB, 1, 0.0)


def test_shaped_transfer_runs_at_the_configured_rate():
    clock = VirtualClock()
    a = nic(clock, "snic", 0.08)  # 10 MB/s, 10 kB burst
    ((t, end),) = run(clock, stream(a.transfer, 10 * MB, 100_000, clock))
    assert end == pytest.approx((10 * MB - 10_000) / (10 * MB))
    assert (t.state, t.bytes, t.chunks) == (TransferState.DONE, 10 * MB, 100)
    assert a.stats().busy_s_total == pytest.approx(1.0)
    assert a.stats().wait_s_total == pytest.approx(t.queue_wait_s)


def test_latency_is_paid_once_before_the_first_byte():
    clock = VirtualClock()
    a = nic(clock, "cnic", 0, latency_ms=5)
    ((t, end),) = run(clock, stream(a.transfer, 300, 100, clock))
    assert (t.first_byte_at, end, t.queue_wait_s) == (pytest.approx(0.005), pytest.approx(0.005), 0.0)


def test_link_paces_at_the_slower_nic_without_adding_waits_or_latencies():
    clock = VirtualClock()
    src = nic(clock, "snic", 0.16, latency_ms=2)  # 20 MB/s
    dst = nic(clock, "cnic", 0.08, latency_ms=3)  # 10 MB/s: the bottleneck
    ((t, end),) = run(clock, stream(Link(src, dst).transfer, 2 * MB, 50_000, clock))
    assert end == pytest.approx(0.003 + (2 * MB - 10_000) / (10 * MB))
    assert src.stats().bytes_total == dst.stats().bytes_total == 2 * MB
    assert dst.stats().wait_s_total > src.stats().wait_s_total


def test_transfer_pace_one_shot_over_both_nics():
    clock = VirtualClock()
    src, dst = nic(clock, "snic", 0.08), nic(clock, "cnic", 0.8)
    (wait,) = run(clock, transfer_pace(src, dst, MB))
    assert wait == pytest.approx((MB - 10_000) / (10 * MB))


def test_concurrent_transfers_share_a_nic_equally():
    clock = VirtualClock()
    a = nic(clock, "snic", 0.08)
    results = run(clock, *(stream(a.transfer, MB, 10_000, clock) for _ in range(4)))
    ends = [end for _, end in results]
    # 4 MB at 10 MB/s; they alternate chunk by chunk, so they end within one round of each other
    assert max(ends) == pytest.approx((4 * MB - 10_000) / (10 * MB))
    assert max(ends) - min(ends) <= 4 * 10_000 / (10 * MB) + 1e-9


def test_a_link_gets_a_fair_share_of_a_nic_it_shares():
    clock = VirtualClock()
    decode_snic, prefill_cnic, prefill_snic = (
        nic(clock, "d.snic", 0.8),
        nic(clock, "p.cnic", 0.8),
        nic(clock, "p.snic", 0.08),
    )
    # path B (decode snic -> prefill cnic) beside path A on a 10 MB/s prefill snic: B is not slowed by A
    (b, b_end), (a, a_end) = run(
        clock,
        stream(Link(decode_snic, prefill_cnic).transfer, MB, 10_000, clock),
        stream(prefill_snic.transfer, MB, 10_000, clock),
    )
    assert b_end == pytest.approx((MB - 100_000) / (100 * MB))
    assert a_end == pytest.approx((MB - 10_000) / (10 * MB))


@pytest.mark.parametrize("stall_s, lost_s", [(0.03, 0.0), (0.08, 0.03)])
def test_a_stalled_sender_catches_up_within_the_catchup_window(stall_s, lost_s):
    clock = VirtualClock()
    a = EmulatedNIC("snic", 0.08, burst_ms=1, catchup_ms=50, clock=clock, sleep=clock.sleep)  # 10 MB/s

    async def scenario():
        async with a.transfer(MB) as t:
            for i in range(100):
                await t.pace(10_000)
                if i == 30:
                    await clock.sleep(stall_s)  # the process was off the CPU
        return clock()

    (end,) = run(clock, scenario())
    assert end == pytest.approx((MB - 10_000) / (10 * MB) + lost_s)


def test_an_idle_nic_banks_only_its_burst():
    clock = VirtualClock(start=100.0)
    a = EmulatedNIC("snic", 0.08, burst_ms=1, catchup_ms=50, clock=clock, sleep=clock.sleep)
    durations = []
    for _ in range(2):
        start = clock.now
        ((_, end),) = run(clock, stream(a.transfer, MB, 10_000, clock))
        durations.append(end - start)
        clock.now += 10.0  # idle: the bucket fills to its burst, not to the catch-up window
    assert durations == [pytest.approx((MB - 10_000) / (10 * MB))] * 2


def test_queue_depth_counts_declared_bytes_until_let_through():
    clock = VirtualClock()
    a = nic(clock, "snic", 0.08)
    seen = []

    async def scenario():
        async with a.transfer(expected_bytes=100_000) as t:
            seen.append((a.stats().queue_bytes, a.stats().active_transfers, t.state))
            await t.pace(40_000)
            seen.append((a.stats().queue_bytes, a.stats().active_transfers, t.state))
            await t.pace(80_000)  # 20 kB more than declared: queued while it waits
            seen.append((a.stats().queue_bytes, a.stats().active_transfers, t.state))
        seen.append((a.stats().queue_bytes, a.stats().active_transfers, t.state))

    async def probe():
        await clock.sleep(0.005)  # while the second chunk waits for tokens
        seen.append(("probe", a.stats().queue_bytes))

    run(clock, scenario(), probe())
    assert seen == [
        (100_000, 1, TransferState.PENDING),
        (60_000, 1, TransferState.TRANSFERRING),
        ("probe", 80_000),
        (0, 1, TransferState.TRANSFERRING),
        (0, 0, TransferState.DONE),
    ]


def test_failed_transfer_releases_its_queue_and_is_marked_failed():
    clock = VirtualClock()
    a = nic(clock, "snic", 0.08)

    async def scenario():
        with pytest.raises(RuntimeError, match="peer went away"):
            async with a.transfer(expected_bytes=50_000) as t:
                await t.pace(10_000)
                raise RuntimeError("peer went away")
        return t

    (t,) = run(clock, scenario())
    assert (t.state, a.stats().queue_bytes, a.stats().active_transfers, a.stats().transfers_total) == (
        TransferState.FAILED,
        0,
        0,
        1,
    )
    with pytest.raises(RuntimeError, match="failed transfer"):
        asyncio.run(t.pace(1))


def test_send_paces_before_the_body_runs():
    clock = VirtualClock()
    a = nic(clock, "snic", 0.08)

    async def scenario():
        async with a.send(110_000) as t:
            return clock(), t.bytes

    (result,) = run(clock, scenario())
    assert result == (pytest.approx(0.01), 110_000)


@pytest.mark.parametrize(
    "kwargs, message",
    [
        ({"gbps": -1}, "gbps must be >= 0"),
        ({"gbps": 1, "latency_ms": -1}, "latency_ms must be >= 0"),
        ({"gbps": 1, "burst_ms": 0}, "burst_ms must be positive"),
        ({"gbps": 1, "burst_ms": 5, "catchup_ms": 1}, "catchup_ms must be >= burst_ms"),
    ],
)
def test_rejects_bad_settings(kwargs, message):
    with pytest.raises(ValueError, match=message):
        EmulatedNIC("snic", **kwargs)


def test_link_needs_two_nics():
    a = EmulatedNIC("snic", 1)
    with pytest.raises(ValueError, match="two different NICs"):
        Link(a, a)
