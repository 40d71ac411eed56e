"""The hint-driven policy (`hinted`): pinned (an explicit pin, or a next use still ahead: the
predicted return) last, then priority, then expected next use, then LRU; exact orders, the same
from `victims()` and `pop_victim()`."""

import pytest

from agentserve.kv.block_manager import BlockManager
from agentserve.kv.eviction import Hint, HintedPolicy, LRUPolicy, make_eviction_policy
from tests.unit.kv.test_block_manager import ids as chained_ids
from tests.unit.kv.test_block_manager import run_and_cache

pytestmark = pytest.mark.unit


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def ids(*names: str) -> list[bytes]:
    return [n.encode() for n in names]


def policy_with(*names: str) -> tuple[HintedPolicy, Clock]:
    clock = Clock()
    policy = HintedPolicy(clock)
    for b in ids(*names):
        policy.insert(b, 1)
    return policy, clock


def popped(policy) -> list[bytes]:
    out = []
    while (block_id := policy.pop_victim()) is not None:
        out.append(block_id)
    return out


def test_without_hints_it_is_lru():
    hinted, _ = policy_with("a", "b", "c", "d")
    lru = LRUPolicy()
    for b in ids("a", "b", "c", "d"):
        lru.insert(b, 1)
    for policy in (hinted, lru):
        policy.touch(b"b")
        policy.remove(b"c")
    assert list(hinted.victims()) == list(lru.victims()) == ids("a", "d", "b")
    assert popped(hinted) == ids("a", "d", "b") and len(hinted) == 0


def test_pinned_last_then_priority_then_furthest_next_use_then_lru():
    policy, clock = policy_with("lru-old", "pinned", "high", "soon", "late", "low", "lru-new", "overdue", "high-soon")
    policy.hint(b"pinned", Hint(priority=-50, pin_until=130.0))  # pinned beats any priority
    policy.hint(b"high", Hint(priority=10))
    policy.hint(b"soon", Hint(next_use_at=105.0))  # expected back: pinned until then, over "high"
    policy.hint(b"late", Hint(next_use_at=160.0))  # pinned too, but used later than "soon": evicted before it
    policy.hint(b"low", Hint(priority=-1))
    policy.hint(b"overdue", Hint(next_use_at=99.0))  # expected before now: as if unknown
    policy.hint(b"high-soon", Hint(priority=10, next_use_at=150.0))  # among the pinned, priority first
    expected = ids("low", "lru-old", "lru-new", "overdue", "high", "pinned", "late", "soon", "high-soon")
    assert list(policy.victims()) == expected
    assert popped(policy) == expected


def test_a_parked_sessions_blocks_outlast_an_idle_critical_sessions_until_the_predicted_return():
    policy, clock = policy_with("critical", "parked")
    policy.hint(b"critical", Hint(priority=1000))  # idle history of a critical agent: no known next use
    policy.hint(b"parked", Hint(priority=0, next_use_at=101.0))  # a worker due back from its tool in 1 s
    assert list(policy.victims()) == ids("critical", "parked")
    clock.now = 102.0  # a late return: the parked KV is ordered by its priority again
    assert popped(policy) == ids("parked", "critical")


def test_a_pin_ends_and_a_next_use_passes_on_the_clock():
    policy, clock = policy_with("a", "b", "c")
    policy.hint(b"a", Hint(pin_until=110.0))
    policy.hint(b"b", Hint(next_use_at=120.0))  # pinned until its next use
    assert list(policy.victims()) == ids("c", "a", "b")  # among the pinned: the one with no known use first
    clock.now = 115.0  # a's pin is over: back in LRU place
    assert list(policy.victims()) == ids("a", "c", "b")
    clock.now = 125.0  # b's expected use has passed: no one is known to be coming
    assert popped(policy) == ids("a", "b", "c")


def test_hints_merge_and_leave_with_their_block():
    policy, _ = policy_with("a", "b")
    policy.hint(b"a", Hint(pin_until=200.0))
    policy.hint(b"a", Hint(priority=3))  # keeps the pin
    policy.hint(b"unknown", Hint(priority=9))  # not ordered here: ignored
    assert list(policy.victims()) == ids("b", "a")
    policy.remove(b"a")
    policy.insert(b"a", 1)  # evictable again, as a new block: its old hints are gone
    assert list(policy.victims()) == ids("b", "a") and len(policy) == 2
    policy.touch(b"b")
    assert popped(policy) == ids("a", "b")


def test_the_policy_by_name():
    assert isinstance(make_eviction_policy("hinted"), HintedPolicy)


def test_the_block_manager_hints_cached_blocks_now_and_blocks_in_use_when_freed():
    mgr = BlockManager(num_slots=6, block_size=2, eviction_policy="hinted")
    first = run_and_cache(mgr, [1, 2, 3, 4])  # 2 cached blocks
    second = run_and_cache(mgr, [9, 8, 7, 6])
    assert mgr.eviction_order() == [first[1], first[0], second[1], second[0]]  # deepest first
    # A parked critical session's blocks stay over the rest.
    assert mgr.hint(chained_ids([1, 2, 3, 4]), Hint(priority=5)) == 2
    assert mgr.eviction_order() == [second[1], second[0], first[1], first[0]]
    # A block in use gets its hint once freed.
    slots = mgr.pin(chained_ids([9, 8]))
    assert mgr.hint(chained_ids([9, 8, 7, 6]) + [b"absent"], Hint(priority=9)) == 2
    assert mgr.eviction_order() == [first[1], first[0], second[1]]  # the cached one has it now
    mgr.free(slots)
    assert mgr.eviction_order() == [first[1], first[0], second[1], second[0]]
