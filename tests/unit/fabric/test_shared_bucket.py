"""One storage NIC for a node's engines: buckets attached to one file (as separate processes are)
share one rate, queue behind each other, and switch to the catch-up burst while any is sending."""

from __future__ import annotations

import asyncio

import pytest

from agentserve.cluster.settings import FabricSettings
from agentserve.fabric.nic import EmulatedNIC
from agentserve.fabric.profiles import SnicGroup, load_profile
from agentserve.fabric.shared_bucket import SharedTokenBucket
from agentserve.fabric.virtual_time import VirtualClock

pytestmark = pytest.mark.unit

MB = 1_000_000


def test_two_attachments_draw_from_one_bucket(tmp_path):
    clock = VirtualClock()
    path = tmp_path / "snic"
    a = SharedTokenBucket(path, rate=1000, idle_burst=10, busy_burst=100, clock=clock)
    b = SharedTokenBucket(path, rate=1000, idle_burst=10, busy_burst=100, clock=clock)
    assert a.reserve(500) == pytest.approx(0.49)  # the bucket starts with its 10-byte idle burst
    assert b.reserve(500) == pytest.approx(0.99)  # b queues behind a: one bucket, not two
    clock.now = 2.0
    assert a.level() == pytest.approx(10)  # refilled, capped at the idle burst
    b.set_burst(100)  # b starts sending: the node banks catch-up tokens while anyone sends
    clock.now = 3.0
    assert a.level() == pytest.approx(100)
    b.set_burst(10)
    assert a.level() == pytest.approx(10)
    a.close()
    b.close()


def test_a_nodes_engines_share_its_snic_in_time(tmp_path):
    clock = VirtualClock()
    path = str(tmp_path / "node0")
    # Two engines of an 8 Gbps (1 GB/s) node SNIC: together they get it, not 0.5 GB/s each twice.
    nics = [EmulatedNIC("snic", 8, burst_ms=1, clock=clock, sleep=clock.sleep, shared_bucket=path) for _ in range(2)]

    async def load(nic: EmulatedNIC, total: int) -> float:
        async with nic.transfer(total) as t:
            for _ in range(total // 100_000):
                await t.pace(100_000)
                await asyncio.sleep(0)
        return clock()

    alone = asyncio.run(clock.run_until_complete([load(nics[0], 10 * MB)]))
    assert alone[0] == pytest.approx(0.01, abs=0.002)  # 10 MB at 1 GB/s, the whole node's rate
    start = clock.now
    both = asyncio.run(clock.run_until_complete([load(nics[0], 10 * MB), load(nics[1], 10 * MB)]))
    assert max(both) - start == pytest.approx(0.02, abs=0.002)  # 20 MB through one 1 GB/s SNIC


def test_up_groups_each_roles_engines_by_node():
    flags = FabricSettings("dualpath-h800", shared_snic=True).snic_groups("decode", 10, 7000)
    assert [f[3] for f in flags] == ["8"] * 8 + ["2"] * 2
    assert flags[0][1].endswith("agentserve-snic-7000-decode-node0")
    assert flags[9][1].endswith("agentserve-snic-7000-decode-node1")
    assert FabricSettings("dualpath-h800").snic_groups("decode", 3, 7000) == [[], [], []]
    with pytest.raises(ValueError, match="shared_snic needs a profile with a node topology"):
        FabricSettings("h800-node", shared_snic=True).snic_groups("prefill", 1, 7000)
    # The group's bucket runs at its engines' static shares together: 2 x 400 / 8 Gbps, dilated.
    nics = load_profile("dualpath-h800").dilated(10).nics("prefill", SnicGroup(str(flags[9][1]), 2))
    assert (nics["snic"].gbps, nics["cnic"].gbps) == (pytest.approx(10.0), pytest.approx(40.0))
