import pytest

from agentserve.kv.block_hash import block_ids_for
from agentserve.kv.block_manager import Allocation, BlockManager
from agentserve.kv.eviction import EVICTION_POLICIES
from tests.support.eviction import MostRecentFirst

pytestmark = pytest.mark.unit

BS = 2


def ids(tokens):
    return block_ids_for(tokens, BS, "model", "tenant")


def run_and_cache(mgr, tokens):
    """Allocate a sequence with no hits, seal its full blocks, free it; return its slots."""
    block_ids = ids(tokens)
    alloc = mgr.allocate(block_ids, len(tokens), 0)
    for slot, block_id in zip(alloc.slots, block_ids):
        mgr.seal(slot, block_id)
    mgr.free(alloc.slots)
    return alloc.slots


def snapshot(mgr):
    return (mgr.stats(), list(mgr._free), mgr.eviction_order(), dict(mgr._slot_of), list(mgr._refs))


def test_fresh_allocation_takes_free_slots_in_order():
    mgr = BlockManager(num_slots=8, block_size=BS)
    tokens = [1, 2, 3, 4, 5]
    alloc = mgr.allocate(ids(tokens), 5, 0)
    assert alloc == Allocation(slots=[0, 1, 2], num_cached_tokens=0)
    assert mgr.num_free_slots == 5
    assert mgr.stats() == {
        "num_slots": 8,
        "used": 3,
        "held": 0,
        "free": 5,
        "cached": 0,
        "resident_blocks": 0,
        "hit_blocks": 0,
        "miss_blocks": 2,
        "evictions": 0,
    }


def test_sealed_blocks_are_hit_after_free():
    mgr = BlockManager(num_slots=8, block_size=BS)
    run_and_cache(mgr, [1, 2, 3, 4, 5])  # slots 0,1 sealed; slot 2 (partial) back to free
    assert mgr.stats()["cached"] == 2 and mgr.stats()["free"] == 6
    tokens = [1, 2, 3, 4, 9, 9, 7]
    block_ids = ids(tokens)
    assert mgr.cached_prefix(block_ids) == 2
    alloc = mgr.allocate(block_ids, len(tokens), 2)
    assert alloc.slots[:2] == [0, 1]
    assert len(alloc.slots) == 4
    assert alloc.num_cached_tokens == 4
    assert mgr.stats()["cached"] == 0
    assert mgr.stats()["hit_blocks"] == 2


def test_cached_prefix_stops_at_first_miss_and_changes_nothing():
    mgr = BlockManager(num_slots=8, block_size=BS)
    run_and_cache(mgr, [1, 2, 3, 4])
    before = snapshot(mgr)
    other = ids([1, 2, 9, 9, 3, 4])
    assert mgr.cached_prefix(other) == 1
    assert mgr.cached_prefix([]) == 0
    assert snapshot(mgr) == before


def test_eviction_order_is_lru_and_deepest_block_first():
    mgr = BlockManager(num_slots=4, block_size=BS)
    a, b = [1, 1, 2, 2], [3, 3, 4, 4]
    assert run_and_cache(mgr, a) == [0, 1]
    assert run_and_cache(mgr, b) == [2, 3]
    # Freed tail-first: LRU order is a1, a0, b1, b0.
    assert mgr.eviction_order() == [1, 0, 3, 2]
    alloc = mgr.allocate(ids([5, 5, 6, 6, 7, 7]), 6, 0)
    assert alloc.slots == [1, 0, 3]
    assert mgr.cached_prefix(ids(a)) == 0
    assert mgr.cached_prefix(ids(b)) == 1  # b's root survived, its second block did not
    assert mgr.stats()["evictions"] == 3
    assert mgr.stats()["resident_blocks"] == 1


def test_the_lru_policy_by_name_evicts_the_least_recently_freed_slot_first():
    mgr = BlockManager(num_slots=6, block_size=BS, eviction_policy="lru")
    a, b, c = [1, 1, 2, 2], [3, 3, 4, 4], [5, 5, 6, 6]
    run_and_cache(mgr, a)  # slots 0, 1
    run_and_cache(mgr, b)  # slots 2, 3
    run_and_cache(mgr, c)  # slots 4, 5
    assert mgr.eviction_order() == [1, 0, 3, 2, 5, 4]
    mgr.free(mgr.allocate(ids(b), 4, 2).slots)  # a hit and freed again: b is the most recent now
    assert mgr.eviction_order() == [1, 0, 5, 4, 3, 2]
    assert mgr.allocate(ids([7, 7, 8, 8, 9, 9]), 6, 0).slots == [1, 0, 5]
    assert mgr.eviction_order() == [4, 3, 2]
    assert mgr.stats()["evictions"] == 3


def test_the_named_policy_decides_which_cached_slot_is_evicted(monkeypatch):
    monkeypatch.setitem(EVICTION_POLICIES, "mru", MostRecentFirst)
    mgr = BlockManager(num_slots=4, block_size=BS, eviction_policy="mru")
    run_and_cache(mgr, [1, 1, 2, 2])
    run_and_cache(mgr, [3, 3, 4, 4])
    assert mgr.eviction_order() == [2, 3, 0, 1]
    assert mgr.allocate(ids([5, 5]), 2, 0).slots == [2]
    b = ids([3, 3, 4, 4])
    assert mgr.lookup(b[0]) is None and mgr.lookup(b[1]) == 3 and mgr.cached_prefix(ids([1, 1, 2, 2])) == 2


def test_an_unknown_policy_name_is_refused_naming_the_choices():
    with pytest.raises(ValueError, match="unknown eviction policy 'fifo'; choose one of: hinted, lru"):
        BlockManager(num_slots=4, block_size=BS, eviction_policy="fifo")


def test_free_list_is_used_before_evicting():
    mgr = BlockManager(num_slots=4, block_size=BS)
    run_and_cache(mgr, [1, 1, 2, 2])  # slots 0,1 cached; 2,3 free
    alloc = mgr.allocate(ids([8, 8, 9, 9]), 4, 0)
    assert alloc.slots == [2, 3]
    assert mgr.stats()["evictions"] == 0
    assert mgr.cached_prefix(ids([1, 1, 2, 2])) == 2


def test_hit_revives_cached_slot_so_it_is_not_evicted():
    mgr = BlockManager(num_slots=4, block_size=BS)
    a = [1, 1, 2, 2]
    run_and_cache(mgr, a)
    run_and_cache(mgr, [3, 3, 4, 4])  # LRU: 1, 0, 3, 2
    hit = mgr.allocate(ids(a), 4, 2)  # revives slots 0 and 1
    assert hit.slots == [0, 1]
    assert mgr.eviction_order() == [3, 2]
    fresh = mgr.allocate(ids([5, 5, 6, 6]), 4, 0)
    assert fresh.slots == [3, 2]
    assert mgr.num_free_slots == 0


def test_hit_on_in_use_block_shares_the_slot_and_counts_refs():
    mgr = BlockManager(num_slots=8, block_size=BS)
    tokens = [1, 1, 2, 2]
    block_ids = ids(tokens)
    first = mgr.allocate(block_ids, 4, 0)
    for slot, block_id in zip(first.slots, block_ids):
        mgr.seal(slot, block_id)
    second = mgr.allocate(block_ids, 4, mgr.cached_prefix(block_ids))
    assert second.slots == first.slots
    assert mgr._refs[:2] == [2, 2]
    mgr.free(first.slots)
    assert mgr.stats()["cached"] == 0 and mgr.stats()["used"] == 2
    mgr.free(second.slots)
    assert mgr.stats()["cached"] == 2 and mgr.stats()["used"] == 0


def test_double_free_raises_and_changes_nothing():
    mgr = BlockManager(num_slots=4, block_size=BS)
    alloc = mgr.allocate(ids([1, 1, 2, 2]), 4, 0)
    mgr.free(alloc.slots)
    before = snapshot(mgr)
    with pytest.raises(ValueError, match="double free"):
        mgr.free(alloc.slots)
    assert snapshot(mgr) == before


def test_free_of_a_slot_listed_twice_beyond_its_refs_raises_before_mutating():
    mgr = BlockManager(num_slots=4, block_size=BS)
    alloc = mgr.allocate(ids([1, 1]), 2, 0)
    before = snapshot(mgr)
    with pytest.raises(ValueError, match="double free"):
        mgr.free([alloc.slots[0], alloc.slots[0]])
    assert snapshot(mgr) == before


def test_cannot_allocate_means_allocate_raises_and_state_is_unchanged():
    mgr = BlockManager(num_slots=3, block_size=BS)
    mgr.allocate(ids([1, 1, 2, 2]), 4, 0)
    tokens = [5, 5, 6, 6]
    assert not mgr.can_allocate(4, 0)
    assert not mgr.can_allocate(4, 0, ids(tokens))
    before = snapshot(mgr)
    with pytest.raises(RuntimeError, match="out of KV slots"):
        mgr.allocate(ids(tokens), 4, 0)
    assert snapshot(mgr) == before


def test_revived_hits_are_not_counted_as_fresh_capacity():
    mgr = BlockManager(num_slots=3, block_size=BS)
    a = [1, 1, 2, 2]
    run_and_cache(mgr, a)  # slots 0,1 cached; slot 2 free: 3 allocatable
    tokens = a + [3, 3, 4, 4]  # 2 hits (which leave the evictable pool) + 2 fresh > 1 left
    block_ids = ids(tokens)
    assert mgr.num_free_slots == 3
    assert not mgr.can_allocate(8, 2, block_ids)
    before = snapshot(mgr)
    with pytest.raises(RuntimeError):
        mgr.allocate(block_ids, 8, 2)
    assert snapshot(mgr) == before
    assert mgr.can_allocate(6, 2, block_ids[:3])
    assert mgr.allocate(block_ids[:3], 6, 2).slots == [0, 1, 2]


def test_can_allocate_without_ids_is_conservative():
    mgr = BlockManager(num_slots=3, block_size=BS)
    a = [1, 1, 2, 2]
    block_ids = ids(a)
    holder = mgr.allocate(block_ids, 4, 0)
    for slot, block_id in zip(holder.slots, block_ids):
        mgr.seal(slot, block_id)
    # Both hits are in use, so only 1 fresh slot is needed and 1 is free.
    assert mgr.can_allocate(6, 2, ids(a + [3, 3]))
    assert not mgr.can_allocate(6, 2)


def test_allocate_rejects_bad_requests_without_mutating():
    mgr = BlockManager(num_slots=8, block_size=BS)
    tokens = [1, 1, 2, 2, 3]
    block_ids = ids(tokens)
    before = snapshot(mgr)
    with pytest.raises(ValueError, match="full-block ids"):
        mgr.allocate(block_ids[:1], 5, 0)
    with pytest.raises(ValueError, match="not resident"):
        mgr.allocate(block_ids, 5, 1)
    with pytest.raises(ValueError, match="num_hit_blocks"):
        mgr.allocate(block_ids, 5, 3)
    with pytest.raises(ValueError, match="num_tokens"):
        mgr.allocate([], 0, 0)
    assert snapshot(mgr) == before


def test_seal_with_duplicate_id_keeps_existing_mapping():
    mgr = BlockManager(num_slots=4, block_size=BS)
    block_ids = ids([1, 1])
    a = mgr.allocate(block_ids, 2, 0)  # both computed the block before either sealed it
    b = mgr.allocate(block_ids, 2, 0)
    mgr.seal(a.slots[0], block_ids[0])
    mgr.seal(b.slots[0], block_ids[0])
    assert mgr._slot_of[block_ids[0]] == a.slots[0]
    mgr.free(b.slots)
    assert mgr.stats()["free"] == 3 and mgr.stats()["cached"] == 0
    mgr.free(a.slots)
    assert mgr.stats()["cached"] == 1
    assert mgr.allocate(block_ids, 2, mgr.cached_prefix(block_ids)).slots == a.slots


def test_seal_rules():
    mgr = BlockManager(num_slots=4, block_size=BS)
    first, second = ids([1, 1, 2, 2])
    alloc = mgr.allocate([first, second], 4, 0)
    mgr.seal(alloc.slots[0], first)
    mgr.seal(alloc.slots[0], first)  # idempotent
    with pytest.raises(ValueError, match="different block id"):
        mgr.seal(alloc.slots[0], second)
    with pytest.raises(ValueError, match="not in use"):
        mgr.seal(3, second)
    with pytest.raises(ValueError, match="slot must be"):
        mgr.seal(4, second)


def test_append_grows_one_slot_when_a_block_starts():
    mgr = BlockManager(num_slots=3, block_size=BS)
    slots = mgr.allocate(ids([1, 1]), 2, 0).slots
    assert slots == [0]
    assert mgr.can_append(slots, 3)
    mgr.append(slots, 3)
    assert slots == [0, 1]
    mgr.append(slots, 4)  # still fits in slot 1
    assert slots == [0, 1]
    with pytest.raises(ValueError, match="one token at a time"):
        mgr.append(slots, 7)
    mgr.append(slots, 5)
    assert slots == [0, 1, 2]
    assert not mgr.can_append(slots, 7)
    before = snapshot(mgr)
    with pytest.raises(RuntimeError, match="out of KV slots"):
        mgr.append(slots, 7)
    assert slots == [0, 1, 2] and snapshot(mgr) == before


def test_append_can_evict_cached_block():
    mgr = BlockManager(num_slots=2, block_size=BS)
    run_and_cache(mgr, [1, 1])  # slot 0 cached, slot 1 free
    slots = mgr.allocate(ids([2, 2]), 2, 0).slots
    assert slots == [1]
    mgr.append(slots, 3)
    assert slots == [1, 0]
    assert mgr.cached_prefix(ids([1, 1])) == 0


@pytest.mark.parametrize("num_slots, block_size", [(0, 16), (4, 0), (-1, 16), (4, 1.5)])
def test_constructor_validates(num_slots, block_size):
    with pytest.raises(ValueError):
        BlockManager(num_slots, block_size)


def test_lookup_finds_resident_blocks_without_touching_lru():
    mgr = BlockManager(num_slots=4, block_size=BS)
    run_and_cache(mgr, [1, 1, 2, 2])
    first, second = ids([1, 1, 2, 2])
    before = snapshot(mgr)
    assert mgr.lookup(first) == 0 and mgr.lookup(second) == 1
    assert mgr.lookup(ids([9, 9])[0]) is None
    assert snapshot(mgr) == before


def test_pinned_blocks_survive_eviction_pressure_until_freed_and_count_no_hits():
    mgr = BlockManager(num_slots=4, block_size=BS)
    cached = ids([1, 2, 3, 4])
    slots = run_and_cache(mgr, [1, 2, 3, 4])
    hits_before = mgr.stats()["hit_blocks"]
    assert mgr.pin(cached) == slots and mgr.stats()["hit_blocks"] == hits_before
    assert not mgr.can_allocate(6, 0, ids([9, 9, 9, 9, 9, 9]))  # only 2 slots are not pinned
    other = mgr.allocate(ids([7, 7, 7, 7]), 4, 0)  # takes the 2 free slots, evicts nothing
    assert mgr.cached_prefix(cached) == 2 and mgr.stats()["evictions"] == 0
    mgr.free(other.slots)
    mgr.free(slots)  # unpinned: cached again, evictable
    mgr.allocate(ids([8, 8, 8, 8, 8, 8, 8, 8]), 8, 0)
    assert mgr.cached_prefix(cached) == 0


def test_pinning_a_block_not_resident_pins_nothing():
    mgr = BlockManager(num_slots=4, block_size=BS)
    cached = ids([1, 2])
    run_and_cache(mgr, [1, 2])
    before = snapshot(mgr)
    with pytest.raises(ValueError, match="not resident"):
        mgr.pin(cached + ids([5, 6]))
    assert snapshot(mgr) == before


def test_reserve_takes_fresh_slots_and_available_after_counts_revived_hits():
    manager = BlockManager(num_slots=4, block_size=2)
    slots = manager.allocate([b"a"], 2, 0).slots
    manager.seal(slots[0], b"a")
    manager.free(slots)  # b"a" cached: evictable, so counted free
    assert manager.num_free_slots == 4
    assert manager.available_after([b"a"]) == 3  # referencing the hit revives it
    assert manager.available_after([b"zz"]) == 4  # not resident: nothing revived
    taken = manager.reserve(3)
    assert sorted(taken) == [1, 2, 3] and manager.lookup(b"a") == 0  # the free list first, the hit kept
    with pytest.raises(RuntimeError, match="out of KV slots: need 2 fresh slots, 1 available"):
        manager.reserve(2)
    manager.free(taken)
    assert manager.stats()["free"] == 3


def test_drop_frees_cached_blocks_and_leaves_blocks_in_use():
    mgr = BlockManager(num_slots=8, block_size=BS)
    parked = [1, 2, 3, 4, 5, 6]
    run_and_cache(mgr, parked)  # slots 0-2 cached
    running = ids([1, 2, 7, 8])  # a running sequence shares the first block
    alloc = mgr.allocate(running, 4, 1)
    assert mgr.drop(ids(parked) + [b"absent" * 4]) == 2  # block 0 is in use; the absent id is skipped
    assert mgr.cached_prefix(ids(parked)) == 1 and mgr.stats()["cached"] == 0
    assert list(mgr._free)[-2:] == [2, 1]  # deepest first
    mgr.free(alloc.slots)
    assert mgr.drop(ids(parked)) == 1 and mgr.cached_prefix(ids(parked)) == 0


def test_held_blocks_are_counted_apart_and_released_only_once():
    mgr = BlockManager(num_slots=4, block_size=BS)
    alloc = mgr.allocate(ids([1, 2, 3, 4]), 4, 0)
    for slot, block_id in zip(alloc.slots, ids([1, 2, 3, 4])):
        mgr.seal(slot, block_id)
    held = mgr.hold(ids([1, 2, 3, 4]))  # held while the sequence still runs: in use, not idle
    assert (mgr.stats()["used"], mgr.stats()["held"]) == (2, 0)
    mgr.free(alloc.slots)  # the sequence ends: only the hold keeps them
    assert (mgr.stats()["used"], mgr.stats()["held"], mgr.stats()["cached"]) == (2, 2, 0)
    mgr.release(held)
    assert (mgr.stats()["used"], mgr.stats()["held"], mgr.stats()["cached"]) == (0, 0, 2)
    with pytest.raises(ValueError, match="is not held"):
        mgr.release(held)
    assert (mgr.stats()["used"], mgr.stats()["cached"]) == (0, 2)
