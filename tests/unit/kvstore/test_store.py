import os

import pytest
import torch

from agentserve.kv.block_format import (
    CorruptBlockError,
    FingerprintMismatchError,
    decode_layers,
    deserialize_blocks,
    read_header,
    serialize_blocks,
)
from agentserve.kv.eviction import EVICTION_POLICIES, Hint
from agentserve.kvstore.blockfile import LayerRangeError
from agentserve.kvstore.layout import TEMP_SUFFIX, block_path
from agentserve.kvstore.ssd import BlockRejectedError
from agentserve.kvstore.store import KVStore, StoreFullError
from agentserve.kvstore.types import Tier
from tests.support.eviction import MostRecentFirst
from tests.support.kv_blocks import FP, block_size, payload_offset

pytestmark = pytest.mark.unit

N, D, S = Tier.NONE, Tier.DRAM, Tier.SSD
SIZE = block_size()


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def put(store, blocks, *names):
    for name in names:
        block_id, data = blocks[name]
        store.put(block_id, data, FP)


def tiers(store, blocks, names="abcde"):
    return "".join(store.lookup([blocks[n][0]]).tiers[0].name[0] for n in names)


def on_disk(tmp_path, blocks):
    return "".join(n for n, (b, _) in blocks.items() if block_path(tmp_path, b).exists())


def test_a_write_is_durable_on_ssd_and_cached_in_dram(open_store, tmp_path, blocks):
    store = open_store(dram_blocks=10)
    put(store, blocks, "a")
    assert block_path(tmp_path, blocks["a"][0]).read_bytes() == blocks["a"][1]
    assert tiers(store, blocks) == "DNNNN"
    read = store.read(blocks["a"][0], FP)
    assert (read.data, read.tier, read.layers, read.num_layers) == (blocks["a"][1], D, range(3), 3)
    assert store.lookup([blocks["a"][0], blocks["b"][0], blocks["a"][0]]).prefix_blocks == 1


def test_dram_evicts_least_recently_used_and_stays_within_ssd(open_store, blocks):
    store = open_store(dram_blocks=2)
    put(store, blocks, "a", "b", "c")
    assert tiers(store, blocks, "abc") == "SDD"
    assert store.read(blocks["a"][0], FP).tier is S  # promoted: b is now the least recently used
    assert tiers(store, blocks, "abc") == "DSD"
    store.read(blocks["c"][0], FP)
    put(store, blocks, "d")
    assert tiers(store, blocks, "abcd") == "SSDD"
    stats = store.stats()
    assert stats.dram.evictions == 3 and stats.dram.peak_bytes == 2 * SIZE and stats.ssd.evictions == 0


def test_ssd_evicts_in_exact_lru_order(open_store, tmp_path, blocks):
    store = open_store(ssd_blocks=3)
    put(store, blocks, "a", "b", "c")
    store.read(blocks["a"][0], FP)
    put(store, blocks, "d")
    assert on_disk(tmp_path, blocks) == "acd"
    put(store, blocks, "b")  # b is new again; c is now the least recently used
    assert on_disk(tmp_path, blocks) == "abd"
    put(store, blocks, "d")  # re-writing a stored block uses it: a goes next
    put(store, blocks, "e")
    assert on_disk(tmp_path, blocks) == "bde" and tiers(store, blocks) == "NSNSS"
    stats = store.stats()
    assert stats.ssd.evictions == 3 and stats.ssd.peak_bytes == 3 * SIZE and stats.ssd.bytes == 3 * SIZE


def test_both_tiers_evict_in_the_order_of_the_policy_named(open_store, tmp_path, blocks, monkeypatch):
    monkeypatch.setitem(EVICTION_POLICIES, "mru", MostRecentFirst)
    store = open_store(dram_blocks=2, ssd_blocks=3, eviction_policy="mru")
    put(store, blocks, "a", "b", "c")  # DRAM holds 2: c evicted b, the most recent then
    assert tiers(store, blocks, "abc") == "DSD"
    store.read(blocks["a"][0], FP)
    put(store, blocks, "d")  # the SSD drops a, just read, and DRAM with it (inclusive): d fits
    assert on_disk(tmp_path, blocks) == "bcd" and tiers(store, blocks, "abcd") == "NSDD"


def test_an_unknown_policy_name_is_refused(open_store):
    with pytest.raises(ValueError, match="unknown eviction policy 'lfu'; choose one of: hinted, lru"):
        open_store(eviction_policy="lfu")


def test_a_hint_from_now_is_on_the_store_clock(open_store):
    store = open_store(clock=Clock())
    assert store.hint_from_now(priority=2, next_use_in_s=5) == Hint(priority=2, next_use_at=1005.0)
    assert store.hint_from_now() == Hint()


def test_ssd_eviction_drops_the_dram_copy(open_store, blocks):
    store = open_store(dram_blocks=5, ssd_blocks=2)
    put(store, blocks, "a", "b", "c")
    assert tiers(store, blocks, "abc") == "NDD"
    assert store.read(blocks["a"][0], FP) is None
    assert store.stats().dram.blocks == 2


def test_pinned_blocks_outlive_eviction_until_their_ttl(open_store, blocks):
    clock = Clock()
    store = open_store(ssd_blocks=2, clock=clock)
    put(store, blocks, "a", "b")
    assert store.pin([blocks["a"][0], blocks["c"][0]], ttl_s=10) == 1  # c is not stored
    put(store, blocks, "c")
    assert tiers(store, blocks, "abc") == "SNS"
    put(store, blocks, "d")  # a is older but pinned
    assert tiers(store, blocks, "abcd") == "SNNS"
    clock.now += 10
    put(store, blocks, "e")
    assert tiers(store, blocks) == "NNNSS"
    assert store.stats().pinned_blocks == 0


def test_when_pins_fill_the_ssd_writes_are_refused_and_nothing_is_lost(open_store, tmp_path, blocks):
    store = open_store(ssd_blocks=2)
    put(store, blocks, "a", "b")
    store.pin([blocks["a"][0], blocks["b"][0]], ttl_s=60)
    with pytest.raises(StoreFullError, match="SSD tier full"):
        put(store, blocks, "c")
    assert store.get(blocks["a"][0], FP) == blocks["a"][1] and store.get(blocks["b"][0], FP) == blocks["b"][1]
    assert on_disk(tmp_path, blocks) == "ab" and not list(tmp_path.rglob(f"*{TEMP_SUFFIX}"))
    assert store.unpin([blocks["a"][0], blocks["c"][0]]) == 1
    put(store, blocks, "c")
    assert on_disk(tmp_path, blocks) == "bc"


@pytest.mark.parametrize("dram_blocks, tier", [(0, S), (5, D)])
@pytest.mark.parametrize(
    "layers, expected", [(range(1, 3), range(1, 3)), (slice(2, None), range(2, 3)), (range(0, 1), range(0, 1))]
)
def test_a_layer_range_read_decodes_like_the_whole_block(open_store, blocks, dram_blocks, tier, layers, expected):
    store = open_store(dram_blocks=dram_blocks)
    block_id, data = blocks["a"]
    put(store, blocks, "a")
    read = store.read(block_id, FP, layers)
    assert (read.tier, read.layers, read.num_layers) == (tier, expected, 3)
    header = read_header(read.data)
    part = decode_layers(header, memoryview(read.data)[read.header_size :], read.layers)
    whole = deserialize_blocks(data, FP, layers=expected)
    assert torch.equal(part.k, whole.k) and torch.equal(part.v, whole.v)


@pytest.mark.parametrize("dram_blocks", [0, 5])
@pytest.mark.parametrize("layers", [range(2, 5), range(3, 3), slice(3, None), range(-1, 2)])
def test_a_bad_layer_range_is_an_error_and_keeps_the_block(open_store, blocks, dram_blocks, layers):
    store = open_store(dram_blocks=dram_blocks)
    block_id, data = blocks["a"]
    put(store, blocks, "a")
    with pytest.raises(LayerRangeError, match=f"block {block_id.hex()}: layers must be a non-empty range"):
        store.read(block_id, FP, layers)
    assert store.get(block_id, FP) == data and store.stats().corrupt_dropped == 0


@pytest.mark.parametrize("dram_blocks", [0, 5])
def test_another_models_fingerprint_is_refused_and_the_block_kept(open_store, blocks, dram_blocks):
    store = open_store(dram_blocks=dram_blocks)
    block_id, data = blocks["a"]
    put(store, blocks, "a")
    for layers in (None, range(0, 1)):
        with pytest.raises(FingerprintMismatchError, match="expected other-model"):
            store.read(block_id, "other-model", layers)
    with pytest.raises(FingerprintMismatchError):
        store.put(block_id, data, "other-model")
    assert store.get(block_id, FP) == data


def big_block(block_id: bytes) -> bytes:
    k = torch.randn(3, 1, 64, 2, 8)
    return bytes(serialize_blocks(k, k, [block_id], FP))


def corrupt(data: bytes) -> bytes:
    raw = bytearray(data)
    raw[payload_offset(data)] ^= 0x10
    return bytes(raw)


def test_rejected_writes_evict_nothing(open_store, tmp_path, blocks):
    store = open_store(ssd_blocks=2)
    put(store, blocks, "a", "b")
    c_id, c_data = blocks["c"]
    with pytest.raises(ValueError, match="over the SSD budget"):
        store.put(c_id, big_block(c_id), FP)
    with pytest.raises(CorruptBlockError, match="layer 1 checksum mismatch"):
        store.put(c_id, corrupt(c_data), FP)
    assert on_disk(tmp_path, blocks) == "ab"
    d_id, d_data = blocks["d"]
    with pytest.raises(BlockRejectedError, match="block 1 .* layer 1 checksum mismatch") as info:
        store.put_many(FP, [(c_id, c_data), (d_id, corrupt(d_data))])
    assert info.value.index == 1
    assert on_disk(tmp_path, blocks) == "bc"  # the good block before the bad one is stored


def test_an_oversize_block_is_rejected(tmp_path, blocks):
    block_id, data = blocks["a"]
    store = KVStore.open(tmp_path, dram_budget_bytes=0, ssd_budget_bytes=1 << 20, max_block_bytes=SIZE - 1)
    try:
        with pytest.raises(ValueError, match=f"{SIZE} bytes, over the {SIZE - 1}-byte limit"):
            store.put(block_id, data, FP)
        assert store.stats().ssd.blocks == 0 and store.stats().ssd.peak_bytes == 0
    finally:
        store.close()


@pytest.mark.parametrize("layers", [None, range(0, 1), range(1, 2)])
def test_a_corrupt_file_is_a_miss_and_leaves_every_tier(open_store, tmp_path, blocks, layers):
    store = open_store()
    block_id, data = blocks["a"]
    put(store, blocks, "a")
    path = block_path(tmp_path, block_id)
    raw = bytearray(data)
    raw[payload_offset(data, layer=1) if layers != range(0, 1) else 20] ^= 0x01  # layer 1, or the header
    path.write_bytes(raw)
    assert store.read(block_id, FP, layers) is None
    assert not path.exists() and tiers(store, blocks, "a") == "N"
    stats = store.stats()
    assert (stats.corrupt_dropped, stats.ssd.blocks, stats.ssd.bytes, stats.ssd.misses) == (1, 0, 0, 1)
    put(store, blocks, "a")
    assert store.get(block_id, FP) == data


def test_restart_rebuilds_the_index_in_lru_order_and_trims_to_a_smaller_budget(open_store, tmp_path, blocks):
    store = open_store(ssd_blocks=5)
    put(store, blocks, "d", "a", "c", "b")
    for age, name in enumerate("dacb"):  # file times decide the order after a restart
        os.utime(block_path(tmp_path, blocks[name][0]), ns=(age * 10**9, age * 10**9))
    store.close()
    store = open_store(ssd_blocks=2)
    assert on_disk(tmp_path, blocks) == "bc" and store.stats().ssd.evictions == 2
    assert store.get(blocks["b"][0], FP) == blocks["b"][1]
    put(store, blocks, "e")
    assert on_disk(tmp_path, blocks) == "be"


def test_delete_removes_a_block_from_every_tier(open_store, tmp_path, blocks):
    store = open_store(dram_blocks=5)
    put(store, blocks, "a", "b")
    store.pin([blocks["a"][0]], ttl_s=60)
    assert store.delete([blocks["a"][0], blocks["c"][0]]) == 1
    assert tiers(store, blocks, "ab") == "ND" and on_disk(tmp_path, blocks) == "b"
    assert store.stats().pinned_blocks == 0 and store.stats().dram.blocks == 1
    with pytest.raises(ValueError, match="16 bytes"):
        store.delete([b"short"])


def test_stats_count_hits_and_misses_per_tier(open_store, blocks):
    store = open_store(dram_blocks=1)
    put(store, blocks, "a", "b")
    store.read(blocks["b"][0], FP)  # DRAM hit
    store.read(blocks["a"][0], FP)  # DRAM miss, SSD hit (promoted, b leaves DRAM)
    store.read(blocks["c"][0], FP)  # miss everywhere
    s = store.stats()
    assert (s.dram.hits, s.dram.misses, s.ssd.hits, s.ssd.misses) == (1, 2, 1, 1)
    assert (s.read_bytes, s.write_bytes, s.dram.evictions) == (2 * SIZE, 2 * SIZE, 2)
    assert s.read_bytes_per_s == 2 * SIZE / 10 and s.write_bytes_per_s == 2 * SIZE / 10
    assert store.hint([blocks["a"][0], blocks["c"][0]], Hint(priority=1)) == 1


def test_malformed_ids_are_errors_for_reads_and_not_stored_for_lookups(open_store):
    store = open_store()
    with pytest.raises(ValueError, match="16 bytes"):
        store.read(b"short", FP)
    with pytest.raises(ValueError, match="16 bytes"):
        store.pin([b"short"], ttl_s=1)
    with pytest.raises(ValueError, match="ttl_s"):
        store.pin([], ttl_s=0)
    assert store.lookup([b"short"]).tiers == (N,)


def test_a_nowait_read_serves_warm_blocks_and_hands_back_cold_ones(open_store, blocks, monkeypatch):
    from agentserve.kvstore import blockfile
    from agentserve.kvstore.types import NOT_CACHED

    store = open_store()
    block_id, data = blocks["a"]
    store.put(block_id, data, FP)
    assert store.read(block_id, FP, nowait=True).data == data  # just written: in the page cache

    def cold(*args):
        raise BlockingIOError(11, "not cached")  # what RWF_NOWAIT says for pages not in memory

    monkeypatch.setattr(blockfile.os, "preadv", cold)
    for layers in (None, range(1, 2)):
        assert store.read(block_id, FP, layers, nowait=True) is NOT_CACHED
    s = store.stats()
    assert (s.dram.misses, s.ssd.hits, s.ssd.misses) == (1, 1, 0)  # the refused reads count nothing
    assert store.read(block_id, FP).data == data  # a blocking read does not need RWF_NOWAIT
    assert store.read(blocks["b"][0], FP, nowait=True) is None  # a miss needs no disk
    s = store.stats()
    assert (s.dram.misses, s.ssd.hits, s.ssd.misses) == (3, 2, 1)


def test_a_nowait_read_of_a_cold_file_probes_its_last_byte_before_reading_it(open_store, blocks, monkeypatch):
    from agentserve.kvstore import blockfile
    from agentserve.kvstore.types import NOT_CACHED

    store = open_store()
    block_id, data = blocks["a"]
    store.put(block_id, data, FP)
    monkeypatch.setattr(blockfile, "PROBE_ABOVE", 0)  # the test blocks are small
    asked = []

    def tail_not_cached(fd, buffers, offset, flags):
        asked.append((len(buffers[0]), offset))
        return 0  # RWF_NOWAIT found nothing cached

    monkeypatch.setattr(blockfile.os, "preadv", tail_not_cached)
    assert store.read(block_id, FP, nowait=True) is NOT_CACHED
    assert asked == [(1, SIZE - 1)]  # no block-sized buffer was zeroed and filled in vain
    monkeypatch.undo()
    read = store.read(block_id, FP, nowait=True)  # cached after all: served from the buffer read into
    assert read.data == data and isinstance(read.data, bytearray)


def test_a_read_stream_serves_in_order_until_the_first_absent_block_with_the_next_ones_prefetched(
    open_store, blocks, monkeypatch
):
    store = open_store()
    put(store, blocks, "a", "b", "c", "d")
    advised = []
    monkeypatch.setattr(store.ssd, "prefetch", advised.extend)
    ids = [blocks[n][0] for n in "abe"] + [blocks["c"][0]]  # e is not stored: the stream ends there
    reads = list(store.read_stream(ids, FP, read_ahead_bytes=2 * SIZE))
    assert [r.data for r in reads] == [blocks["a"][1], blocks["b"][1]]
    assert advised == [blocks["a"][0], blocks["b"][0]]  # the window, up to the first absent id
    advised.clear()
    ranged = list(store.read_stream([blocks["c"][0], blocks["d"][0]], FP, range(1, 2)))
    assert [r.layers for r in ranged] == [range(1, 2)] * 2 and advised == []  # ranges are not read ahead
    with pytest.raises(FingerprintMismatchError):
        list(store.read_stream(ids, "another-model"))


def test_prefetch_skips_blocks_in_dram(open_store, blocks, monkeypatch):
    store = open_store(dram_blocks=1)
    put(store, blocks, "a", "b")  # a is evicted from DRAM by b, stays on SSD
    advised = []
    monkeypatch.setattr(store.ssd, "prefetch", advised.extend)
    store.prefetch([blocks["a"][0], blocks["b"][0]])
    assert advised == [blocks["a"][0]]
    assert store.size_of(blocks["b"][0]) == SIZE and store.size_of(blocks["c"][0]) is None


def test_a_write_never_evicts_the_stored_blocks_it_repeats(open_store, tmp_path, blocks):
    store = open_store(ssd_blocks=3)
    put(store, blocks, "a", "b", "c")
    store.put_many(FP, [blocks["a"], blocks["d"]])  # a is the oldest, but this write uses it
    assert on_disk(tmp_path, blocks) == "acd"
