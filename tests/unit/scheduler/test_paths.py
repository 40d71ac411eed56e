"""Path policies: which path a turn's store hits take to the prefill engine (DualPath), and split reads."""

from __future__ import annotations

import pytest

from agentserve.contracts import KVPath, LoadPlan, NICStatus, Role
from agentserve.scheduler.paths import AlwaysA, AlwaysB, DualPathPolicy, SplitPolicy, b_share, make_path_policy
from agentserve.scheduler.registry import Engine, EngineRegistry
from tests.unit.scheduler.fakes import loaded_engine, status

pytestmark = pytest.mark.unit

BLOCK_BYTES = 1000


def engine(
    engine_id: str, role: Role, snic_queue: int = 0, planned: int = 0, age_s: float = 0.0, gbps: float = 0.008
) -> Engine:
    """An engine whose last heartbeat (`age_s` ago) reported `snic_queue` bytes on a `gbps` snic."""
    nics = (NICStatus("snic", gbps, snic_queue), NICStatus("cnic", gbps, 0))
    e = Engine(status(engine_id, role, 7000, nics=nics, kv_block_bytes=BLOCK_BYTES), 100.0, clock=lambda: 100.0 + age_s)
    e.snic.route(planned, e.bytes_per_s("snic"), e.clock())
    return e


def test_dualpath_takes_the_shorter_storage_nic_queue_and_ties_go_to_a() -> None:
    policy = DualPathPolicy()
    idle_prefill, busy_prefill = engine("p0", Role.PREFILL), engine("p0", Role.PREFILL, snic_queue=5000)
    idle_decode, busy_decode = engine("d0", Role.DECODE), engine("d0", Role.DECODE, snic_queue=9000)
    assert policy.choose(busy_prefill, idle_decode, hit_blocks=4) == LoadPlan(
        KVPath.B, relay_address=idle_decode.address
    )
    assert policy.choose(busy_prefill, busy_decode, hit_blocks=4) == LoadPlan(KVPath.A)
    assert policy.choose(idle_prefill, idle_decode, hit_blocks=4) == LoadPlan(KVPath.A)  # tie
    assert policy.choose(busy_prefill, idle_decode, hit_blocks=0) == LoadPlan(KVPath.A)  # nothing to load


def test_dualpath_breaks_equal_queues_by_the_storage_nic_that_read_less_lately() -> None:
    # Both queues are empty (the read routed to p0 at t=99 s drained in 3 ms), so the side that
    # carried fewer bytes lately reads: B while p0 read more, A once d0 has read more.
    prefill, relay = engine("p0", Role.PREFILL), engine("d0", Role.DECODE)
    prefill.snic.route(3000, prefill.bytes_per_s("snic"), now=99.0)
    assert (prefill.snic_queue_bytes, relay.snic_queue_bytes) == (0, 0)
    assert DualPathPolicy().choose(prefill, relay, hit_blocks=4) == LoadPlan(KVPath.B, relay_address=relay.address)
    relay.snic.route(4000, relay.bytes_per_s("snic"), now=99.0)
    assert DualPathPolicy().choose(prefill, relay, hit_blocks=4) == LoadPlan(KVPath.A)


def test_a_prefill_still_computing_after_its_reads_has_an_idle_storage_nic() -> None:
    # The scheduler routed a 5 ms read to p0 10 ms ago and the prefill has not returned: the read is
    # done, so p0's queue is empty and an idle relay no longer looks shorter.
    prefill, relay = engine("p0", Role.PREFILL, age_s=0.010), engine("d0", Role.DECODE, age_s=0.010)
    prefill.snic.route(5000, prefill.bytes_per_s("snic"), now=100.0)
    assert (prefill.snic.held, prefill.snic_queue_bytes) == (5000, 0)
    relay.snic.route(5000, relay.bytes_per_s("snic"), now=100.0)  # equal recent load: a full tie
    assert DualPathPolicy().choose(prefill, relay, hit_blocks=4) == LoadPlan(KVPath.A)


def test_dualpath_sees_reads_it_routed_before_the_next_heartbeat() -> None:
    # Both heartbeats said idle, but this scheduler just sent a 50-block load to the prefill's snic.
    prefill, decode = engine("p0", Role.PREFILL, planned=50 * BLOCK_BYTES), engine("d0", Role.DECODE)
    assert DualPathPolicy().choose(prefill, decode, hit_blocks=4).path is KVPath.B
    # ... and a reported queue larger than what we planned counts as reported.
    prefill = engine("p0", Role.PREFILL, snic_queue=80 * BLOCK_BYTES, planned=50 * BLOCK_BYTES)
    assert prefill.snic_queue_bytes == 80 * BLOCK_BYTES


def test_a_reported_queue_drains_at_the_nics_rate_until_the_next_heartbeat() -> None:
    # 0.008 Gbps = 1 MB/s: 5000 bytes reported 3 ms ago are 2000 now, 10 ms ago they are gone.
    assert engine("p0", Role.PREFILL, snic_queue=5000, age_s=0.003).snic_queue_bytes == 2000
    assert engine("p0", Role.PREFILL, snic_queue=5000, age_s=0.010).snic_queue_bytes == 0
    stale = engine("p0", Role.PREFILL, snic_queue=5000, age_s=0.5)
    assert DualPathPolicy().choose(stale, engine("d0", Role.DECODE), hit_blocks=4).path is KVPath.A
    # An unshaped NIC has no rate to drain at: its report stands.
    assert engine("p0", Role.PREFILL, snic_queue=5000, age_s=0.5, gbps=0).snic_queue_bytes == 5000


def test_registry_plans_work_only_while_the_block_runs() -> None:
    registry = EngineRegistry(5.0)
    registry.register(status("p0", Role.PREFILL, 6000, unfinished_prefill_tokens=40))
    prefill = registry.get("p0")
    assert prefill is not None
    with registry.plan(prefill, snic_bytes=3000, cnic_bytes=500, prefill_tokens=25):
        assert (prefill.snic_queue_bytes, prefill.cnic_queue_bytes) == (3000, 500)
        assert prefill.unfinished_prefill_tokens == 40  # the heartbeat's figure is larger
        with registry.plan(prefill, prefill_tokens=30):
            assert prefill.unfinished_prefill_tokens == 55
    assert (prefill.snic_queue_bytes, prefill.cnic_queue_bytes, prefill.unfinished_prefill_tokens) == (0, 0, 40)


def test_fixed_policies_and_names() -> None:
    prefill, decode = engine("p0", Role.PREFILL, snic_queue=10**9), engine("d0", Role.DECODE, snic_queue=10**9)
    assert AlwaysA().choose(prefill, decode, 5).path is KVPath.A
    assert AlwaysB().choose(prefill, decode, 5).path is KVPath.B
    assert AlwaysB().choose(prefill, decode, 0).path is KVPath.A
    assert [make_path_policy(n).name for n in ("dualpath", "always-a", "always-b", "split")] == [
        "dualpath",
        "always-a",
        "always-b",
        "split",
    ]
    with pytest.raises(ValueError, match="dualpath, always-a, always-b, split"):
        make_path_policy("round-robin")


def test_engine_status_without_nics_reads_idle() -> None:
    assert status("d0", Role.DECODE, 7000).nic("snic") == NICStatus("snic")


def split(prefill_queue: int = 0, relay_snic: int = 0, relay_cnic: int = 0, relay_gbps: float = 0.008, hits: int = 10):
    """SplitPolicy's plan for `hits` blocks of 1000 bytes, all NICs 1 MB/s unless `relay_gbps`."""
    prefill = loaded_engine("p0", Role.PREFILL, snic_queue=prefill_queue)
    relay = loaded_engine(
        "d1", Role.DECODE, snic_queue=relay_snic, cnic_queue=relay_cnic, snic_gbps=relay_gbps, cnic_gbps=relay_gbps
    )
    plan = SplitPolicy().choose(prefill, relay, hits)
    assert plan.relay_address in ("", relay.address)
    return plan.path, plan.relay_blocks


def test_split_reads_in_proportion_to_free_bandwidth_so_both_legs_finish_together() -> None:
    # Idle and equal: half each way.
    assert split() == (KVPath.SPLIT, 5)
    # 4 ms queued on A: both finish at T = (4000 + 10000) / 2 MB/s = 7 ms, so B reads 7000 bytes.
    assert split(prefill_queue=4000) == (KVPath.SPLIT, 7)
    # A relay three times as fast, 2 ms on A: T = 12000 / 4 MB/s = 3 ms, B reads 9000 bytes.
    assert split(prefill_queue=2000, relay_gbps=0.024) == (KVPath.SPLIT, 9)
    # The relay's slower leg counts: 4 ms on its compute NIC is B's backlog (T = 7 ms, B reads 3000).
    assert split(relay_cnic=4000, relay_snic=1000) == (KVPath.SPLIT, 3)


def test_split_degenerates_to_one_path_when_one_backlog_outlasts_the_other_side() -> None:
    assert split(relay_cnic=12000) == (KVPath.A, 0)  # B's backlog alone exceeds T = 11 ms
    assert split(prefill_queue=20000) == (KVPath.B, 0)  # A's alone exceeds T = 15 ms
    assert split(hits=0) == (KVPath.A, 0)


def test_split_with_unshaped_nics() -> None:
    prefill, relay = engine("p0", Role.PREFILL, gbps=0), engine("d0", Role.DECODE, gbps=0)
    assert b_share(prefill, relay, 10) == 0.5  # both unshaped: evenly
    assert b_share(prefill, engine("d0", Role.DECODE), 10) == 0.0  # only A unshaped: all by A
    assert b_share(engine("p0", Role.PREFILL), relay, 10) == 1.0  # only B unshaped: all by B
    assert SplitPolicy().choose(prefill, relay, 4) == LoadPlan(KVPath.SPLIT, relay.address, relay_blocks=2)
