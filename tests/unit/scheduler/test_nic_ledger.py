"""NICLedger: the scheduler's own account of reads routed to a NIC: backlog, release, recent load."""

from __future__ import annotations

import math

import pytest

from agentserve.scheduler.nic_ledger import RECENT_HALF_LIFE_S, NICLedger

pytestmark = pytest.mark.unit

MB_PER_S = 1e6


def test_routed_bytes_queue_until_the_nic_would_have_moved_them() -> None:
    ledger = NICLedger()
    ledger.route(5000, MB_PER_S, now=10.0)  # 5 ms of reading
    assert [ledger.backlog(MB_PER_S, now) for now in (10.0, 10.002, 10.005, 10.1)] == [5000, 3000, 0, 0]
    # A second read routed while the first is still moving waits behind it (FIFO).
    ledger.route(4000, MB_PER_S, now=10.003)
    assert (ledger.backlog(MB_PER_S, 10.003), ledger.backlog(MB_PER_S, 10.007)) == (6000, 2000)


def test_a_returned_turns_bytes_stop_counting_and_do_not_delay_the_next_read() -> None:
    ledger = NICLedger()
    ledger.route(5000, MB_PER_S, now=0.0)
    ledger.release(5000, now=0.001)  # its prefill returned early: nothing of it can be waiting
    assert (ledger.held, ledger.backlog(MB_PER_S, 0.001)) == (0, 0)
    ledger.route(1000, MB_PER_S, now=0.001)
    assert ledger.backlog(MB_PER_S, 0.001) == 1000  # not 1000 + the released read's 4000


def test_an_unshaped_nic_holds_what_was_routed_until_released() -> None:
    ledger = NICLedger()
    ledger.route(5000, math.inf, now=0.0)
    assert ledger.backlog(math.inf, now=100.0) == 5000
    ledger.release(5000, now=100.0)
    assert ledger.backlog(math.inf, now=100.0) == 0


def test_recent_load_halves_every_half_life_and_survives_release() -> None:
    ledger = NICLedger()
    ledger.route(8000, MB_PER_S, now=0.0)
    ledger.release(8000, now=1.0)
    assert ledger.recent_bytes(RECENT_HALF_LIFE_S) == 4000
    ledger.route(1000, MB_PER_S, now=2 * RECENT_HALF_LIFE_S)
    assert ledger.recent_bytes(2 * RECENT_HALF_LIFE_S) == 3000
    assert ledger.recent_bytes(3 * RECENT_HALF_LIFE_S) == 1500
    assert NICLedger().recent_bytes(5.0) == 0.0


def test_a_noted_write_counts_in_recent_load_but_is_no_read_waiting() -> None:
    ledger = NICLedger()
    ledger.note_write(2000, now=0.0)
    assert (ledger.held, ledger.backlog(MB_PER_S, 0.0), ledger.recent_bytes(0.0)) == (0, 0, 2000)
