import pytest

from agentserve.kv.eviction import LRUPolicy
from agentserve.kvstore.pins import Pins, pick_victims

pytestmark = pytest.mark.unit


def ids(*names: str) -> list[bytes]:
    return [n.encode() for n in names]


def test_pick_victims_skips_pinned_and_stops_when_enough_is_freed():
    policy = LRUPolicy()
    sizes = {b"a": 10, b"b": 20, b"c": 30, b"d": 40}
    for b, size in sizes.items():
        policy.insert(b, size)
    pinned = {b"b"}
    assert pick_victims(policy, 35, sizes.__getitem__, pinned.__contains__) == ids("a", "c")
    assert pick_victims(policy, 0, sizes.__getitem__, pinned.__contains__) == []
    assert pick_victims(policy, 81, sizes.__getitem__, pinned.__contains__) is None  # only 80 unpinned


def test_pins_expire_on_the_store_clock():
    now = [100.0]
    pins = Pins(clock=lambda: now[0])
    assert pins.pin(b"a", 5) == 105.0
    assert pins.pin(b"a", 1) == 105.0  # a shorter pin never shortens a longer one
    pins.pin(b"b", 10)
    assert pins.pinned(b"a") and pins.count() == 2
    now[0] = 105.0
    assert not pins.pinned(b"a") and pins.pinned(b"b") and pins.count() == 1
    assert pins.unpin(b"b") and not pins.unpin(b"b")
    assert pins.count() == 0
