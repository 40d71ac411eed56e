import os
from collections import Counter

import pytest

from agentserve.kvstore.ring import HashRing, resolve_addresses

pytestmark = pytest.mark.unit

IDS = [os.urandom(16) for _ in range(4000)]


def test_blocks_spread_evenly_and_every_ring_agrees():
    ring = HashRing(["10.0.0.1:50052", "10.0.0.2:50052", "10.0.0.3:50052"])
    same = HashRing(["10.0.0.3:50052", "10.0.0.1:50052", "10.0.0.2:50052", "10.0.0.1:50052"])
    owners = Counter(ring.node_for(b) for b in IDS)
    assert set(owners) == set(ring.nodes) and min(owners.values()) > 0.25 * len(IDS)
    assert all(ring.node_for(b) == same.node_for(b) for b in IDS)


def test_adding_an_instance_moves_only_its_share():
    before = HashRing(["a:1", "b:1", "c:1"])
    after = HashRing(["a:1", "b:1", "c:1", "d:1"])
    moved = [b for b in IDS if before.node_for(b) != after.node_for(b)]
    assert all(after.node_for(b) == "d:1" for b in moved)
    assert 0.15 * len(IDS) < len(moved) < 0.35 * len(IDS)


def test_resolving_addresses():
    assert resolve_addresses("10.0.0.2:50052, 10.0.0.1:50052,") == ["10.0.0.1:50052", "10.0.0.2:50052"]
    assert resolve_addresses("localhost:7000") == ["127.0.0.1:7000"]  # IPv4 preferred: one instance
    assert resolve_addresses("[::1]:7000") == ["[::1]:7000"]
    for bad in ("", "kvstore", "kvstore:port", ":50052"):
        with pytest.raises(ValueError):
            resolve_addresses(bad)
    with pytest.raises(ValueError, match="cannot resolve"):
        resolve_addresses("no-such-host.invalid:1")
    with pytest.raises(ValueError, match="at least one node"):
        HashRing([])
