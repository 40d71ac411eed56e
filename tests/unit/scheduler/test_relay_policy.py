"""Relay policies: which decode engine reads and relays a turn's path-B blocks."""

from __future__ import annotations

import pytest

from agentserve.contracts import Role
from agentserve.scheduler.relay_policy import DualPathRelay, OtherDecodeRelay, TurnDecodeRelay, make_relay_policy
from tests.unit.scheduler.fakes import loaded_engine

pytestmark = pytest.mark.unit

NBYTES = 4000  # 4 ms on a 1 MB/s NIC


def decode(engine_id: str, snic: int = 0, cnic: int = 0, cnic_gbps: float = 0.008):
    return loaded_engine(engine_id, Role.DECODE, snic_queue=snic, cnic_queue=cnic, cnic_gbps=cnic_gbps)


def pick(policy, decodes, turn_decode, held_bytes=None):
    choice = policy.pick(decodes, turn_decode, NBYTES, held_bytes)
    return choice.engine.engine_id, choice.reason


def test_dualpath_relays_through_the_decode_engine_that_finishes_first() -> None:
    d0, d1, d2 = decode("d0", snic=6000), decode("d1", snic=1000), decode("d2", snic=500, cnic=9000)
    # Finish times: d0 max(10, 4) ms, d1 max(5, 4), d2 max(4.5, 13): d1, though d0 is the turn's.
    assert pick(DualPathRelay(), [d0, d1, d2], turn_decode=d0) == ("d1", "earliest-finish")


def test_dualpath_ties_go_to_the_turn_decode_engine() -> None:
    d0, d1 = decode("d0"), decode("d1")
    assert pick(DualPathRelay(), [d0, d1], turn_decode=d1) == ("d1", "turn-decode")


def test_dualpath_counts_no_store_read_for_what_a_relay_sends_from_hbm() -> None:
    # d0's snic is busy (20 ms), but holding all 4,000 bytes (the session's KV holder under
    # hbm-first) it sends them from its HBM: only its cnic send counts (4 ms), which beats d1's 5 ms
    # store read. Without held bytes (relay_source=store) d0 reads them too: 24 ms.
    holder, d1 = decode("d0", snic=20000), decode("d1", snic=1000)
    assert pick(DualPathRelay(), [holder, d1], turn_decode=holder, held_bytes={"d0": NBYTES}) == ("d0", "turn-decode")
    assert pick(DualPathRelay(), [holder, d1], turn_decode=holder) == ("d1", "earliest-finish")


def test_dualpath_weighs_compute_nic_headroom() -> None:
    # Same storage queues; d0's compute NIC is a tenth as fast, so its send is the slow leg.
    d0, d1 = decode("d0", cnic_gbps=0.0008), decode("d1", snic=2000)
    assert pick(DualPathRelay(), [d0, d1], turn_decode=d0) == ("d1", "earliest-finish")


def test_turn_decode_and_other_decode() -> None:
    d0, d1, d2 = decode("d0"), decode("d1", snic=5000), decode("d2", snic=3000)
    assert pick(TurnDecodeRelay(), [d0, d1, d2], turn_decode=d1) == ("d1", "turn-decode")
    assert pick(OtherDecodeRelay(), [d0, d1, d2], turn_decode=d0) == ("d2", "other")
    assert pick(OtherDecodeRelay(), [d0], turn_decode=d0) == ("d0", "only-decode")


def test_names() -> None:
    assert [make_relay_policy(n).name for n in ("turn-decode", "dualpath", "other-decode")] == [
        "turn-decode",
        "dualpath",
        "other-decode",
    ]
    choices = "turn-decode, dualpath, other-decode"
    with pytest.raises(ValueError, match=f"relay_policy must be one of {choices}, got 'nearest'"):
        make_relay_policy("nearest")
    # Relays read the store unless asked otherwise by name.
    assert [make_relay_policy("dualpath", s).hbm_first for s in ("store", "hbm-first")] == [False, True]
    assert make_relay_policy("dualpath").hbm_first is False
    with pytest.raises(ValueError, match="relay_source must be one of store, hbm-first, got 'cache'"):
        make_relay_policy("dualpath", "cache")


def test_dualpath_ties_go_to_the_storage_nic_that_read_least_lately_before_the_turn_decode() -> None:
    # Every queue is empty (the common case at low load): d0, the turn's decode engine, read 3000
    # bytes a moment ago and d2 1000, so d1, which read nothing, relays and the decode SNICs take turns.
    d0, d1, d2 = decode("d0"), decode("d1"), decode("d2")
    d0.snic.recent, d2.snic.recent = 3000.0, 1000.0
    d0.snic.recent_at = d2.snic.recent_at = 100.0
    assert pick(DualPathRelay(), [d0, d1, d2], turn_decode=d0) == ("d1", "least-read")
    # A shorter finish still beats fewer bytes read lately.
    assert pick(DualPathRelay(), [d0, decode("d1", snic=500)], turn_decode=d0) == ("d0", "turn-decode")


def test_dualpath_reads_from_the_store_only_what_a_relay_does_not_hold() -> None:
    # d0's snic has 3 ms queued, d1's 1 ms; d0 holds 3,000 of the 4,000 bytes (a shared prefix
    # another turn there brought), so it reads 1 ms: max(4, 4) ms against d1's max(5, 4) ms.
    d0, d1 = decode("d0", snic=3000), decode("d1", snic=1000)
    choice = DualPathRelay().pick([d0, d1], d1, NBYTES, held_bytes={"d0": 3000})
    assert (choice.engine.engine_id, choice.reason) == ("d0", "earliest-finish")
    assert pick(DualPathRelay(), [d0, d1], turn_decode=d1) == ("d1", "turn-decode")  # without it, d1
