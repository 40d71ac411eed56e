import threading

import pytest
import torch

from agentserve.kv.block_format import CorruptBlockError, FingerprintMismatchError, serialize_blocks
from agentserve.kvstore.ssd import BlockRejectedError, SsdTier
from tests.support.kv_blocks import FP, chain, make_block, payload_offset

pytestmark = pytest.mark.unit


@pytest.fixture
def make_store(tmp_path):
    """Open SsdTiers on one data dir; all are closed at teardown."""
    opened: list[SsdTier] = []

    def make(**kwargs) -> SsdTier:
        opened.append(SsdTier(tmp_path, **kwargs))
        return opened[-1]

    yield make
    for store in opened:
        store.close()


def files(store: SsdTier) -> list[str]:
    return sorted(p.name for p in store.root.rglob("*") if p.is_file())


def test_round_trip_is_bit_exact(make_store):
    store = make_store()
    (block_id,) = chain(1)
    data = make_block(block_id)
    assert store.put(block_id, data, FP) is True
    assert store.get(block_id, FP) == data
    assert store.get(block_id) == data  # fingerprint check is optional on read
    path = store.root / block_id.hex()[:2] / f"{block_id.hex()}.kv"
    assert path.read_bytes() == data
    assert store.stats().blocks == 1 and store.stats().bytes == len(data)
    assert store.stats().hits == 2 and store.stats().misses == 0


def test_reput_is_a_no_op(make_store):
    store = make_store()
    (block_id,) = chain(1)
    data = make_block(block_id)
    assert store.put(block_id, data, FP) is True
    assert store.put(block_id, bytearray(data), FP) is False
    assert store.stats().blocks == 1 and store.stats().bytes == len(data)


def test_restart_sees_stored_blocks(make_store):
    ids = chain(3)
    blocks = {block_id: make_block(block_id, seed=i) for i, block_id in enumerate(ids)}
    store = make_store()
    for block_id, data in blocks.items():
        store.put(block_id, data, FP)
    store.close()
    reopened = make_store()
    assert reopened.stats().blocks == 3
    assert reopened.stats().bytes == sum(len(d) for d in blocks.values())
    assert reopened.lookup(ids) == 3
    for block_id, data in blocks.items():
        assert reopened.get(block_id, FP) == data


def test_flipped_byte_on_disk_is_dropped_as_a_miss(make_store):
    store = make_store()
    (block_id,) = chain(1)
    data = make_block(block_id)
    store.put(block_id, data, FP)
    path = store.root / block_id.hex()[:2] / f"{block_id.hex()}.kv"
    raw = bytearray(path.read_bytes())
    raw[payload_offset(data)] ^= 0x01
    path.write_bytes(raw)

    assert store.get(block_id, FP) is None
    assert not path.exists()
    stats = store.stats()
    assert (stats.blocks, stats.bytes, stats.hits, stats.misses, stats.corrupt_dropped) == (0, 0, 0, 1, 1)
    assert store.lookup([block_id]) == 0
    assert store.get(block_id, FP) is None  # now simply unknown: a miss, not counted as corrupt again
    assert store.stats().corrupt_dropped == 1 and store.stats().misses == 2
    assert store.put(block_id, data, FP) is True  # and can be stored again
    assert store.get(block_id, FP) == data


def test_truncated_file_on_disk_is_dropped(make_store):
    store = make_store()
    (block_id,) = chain(1)
    data = make_block(block_id)
    store.put(block_id, data, FP)
    path = store.root / block_id.hex()[:2] / f"{block_id.hex()}.kv"
    path.write_bytes(data[:-1])
    assert store.get(block_id, FP) is None
    assert not path.exists() and store.stats().corrupt_dropped == 1


def test_reading_with_another_models_fingerprint_raises_and_keeps_the_block(make_store):
    store = make_store()
    (block_id,) = chain(1)
    data = make_block(block_id)
    store.put(block_id, data, FP)
    with pytest.raises(FingerprintMismatchError):
        store.get(block_id, "other-model")
    assert store.get(block_id, FP) == data and store.stats().corrupt_dropped == 0


def corrupt_payload(data: bytes) -> bytes:
    raw = bytearray(data)
    raw[payload_offset(data)] ^= 0x80
    return bytes(raw)


def two_blocks_in_one_buffer(block_id: bytes) -> bytes:
    k = torch.randn(3, 2, 16, 2, 8)
    return bytes(serialize_blocks(k, k, block_ids=[block_id, chain(2)[1]], fingerprint=FP))


@pytest.mark.parametrize(
    "case, make, error, match",
    [
        (
            "wrong fingerprint",
            lambda i: make_block(i, fingerprint="other-model"),
            FingerprintMismatchError,
            "other-model",
        ),
        ("wrong id", lambda i: make_block(chain(2)[1]), ValueError, "does not match the id in its header"),
        ("truncated", lambda i: make_block(i)[:-10], CorruptBlockError, "truncated"),
        ("header only", lambda i: make_block(i)[:60], CorruptBlockError, "truncated"),
        ("trailing bytes", lambda i: make_block(i) + b"\0", CorruptBlockError, "1 trailing bytes"),
        ("flipped payload byte", lambda i: corrupt_payload(make_block(i)), CorruptBlockError, "layer 1 checksum"),
        ("not a block", lambda i: b"hello world, not a kv block", ValueError, "magic"),
        ("two blocks", two_blocks_in_one_buffer, ValueError, "exactly 1 block"),
    ],
)
def test_bad_block_is_rejected_and_nothing_is_written(make_store, case, make, error, match):
    store = make_store()
    (block_id,) = chain(1)
    with pytest.raises(error, match=match):
        store.put(block_id, make(block_id), FP)
    assert files(store) == [] and store.stats().blocks == 0 and store.lookup([block_id]) == 0


def test_a_rejection_in_a_batch_says_which_block_of_the_request_and_keeps_its_cause(make_store):
    store = make_store()
    ids = chain(3)
    blocks = [(b, make_block(b)) for b in ids]
    blocks[1] = (ids[1], corrupt_payload(blocks[1][1]))
    with pytest.raises(BlockRejectedError) as info:
        store.put_many(FP, blocks)
    rejected = info.value.of(3)
    expected = f"block 1 of 3 (id {ids[1][:16].hex()}) rejected: layer 1 checksum mismatch; blocks before it are stored"
    assert str(rejected) == expected and rejected.cause is info.value.cause
    assert store.lookup(ids) == 1


def test_bad_id_or_fingerprint_argument_is_rejected(make_store):
    store = make_store()
    (block_id,) = chain(1)
    data = make_block(block_id)
    with pytest.raises(ValueError, match="16 bytes"):
        store.put(block_id[:8], data, FP)
    with pytest.raises(ValueError, match="fingerprint must not be empty"):
        store.put(block_id, data, "")
    assert files(store) == []


def test_oversize_block_is_rejected(make_store):
    (block_id,) = chain(1)
    data = make_block(block_id)
    store = make_store(max_block_bytes=len(data) - 1)
    with pytest.raises(ValueError, match="over the"):
        store.put(block_id, data, FP)
    assert files(store) == []
    store.close()
    assert make_store(max_block_bytes=len(data)).put(block_id, data, FP) is True


def test_a_data_dir_has_one_owner(make_store):
    store = make_store()
    with pytest.raises(RuntimeError, match="in use by another block store"):
        make_store()
    store.close()
    make_store()


def test_unknown_ids_are_misses(make_store):
    store = make_store()
    assert store.get(chain(1)[0], FP) is None
    assert store.get(b"short", FP) is None
    assert store.stats().misses == 2


def test_leftover_temp_files_are_removed_at_start(make_store):
    store = make_store()
    (block_id,) = chain(1)
    data = make_block(block_id)
    store.put(block_id, data, FP)
    shard = store.root / block_id.hex()[:2]
    (shard / f".{block_id.hex()}.abc123.tmp").write_bytes(data[:100])
    (store.root / "7f").mkdir()
    (store.root / "7f" / ".7f00.x.tmp").write_bytes(b"partial")
    store.close()
    reopened = make_store()
    assert files(reopened) == [f"{block_id.hex()}.kv"]
    assert reopened.stats().blocks == 1 and reopened.get(block_id, FP) == data


def test_lookup_counts_the_stored_prefix(make_store):
    store = make_store()
    ids = chain(4)
    for i in (0, 1, 3):
        store.put(ids[i], make_block(ids[i]), FP)
    assert store.lookup(ids) == 2
    assert store.lookup(ids[:1]) == 1
    assert store.lookup([]) == 0
    assert store.lookup([ids[3]]) == 1
    assert store.lookup([ids[2], ids[0]]) == 0
    assert store.stats().hits == 0 and store.stats().misses == 0  # lookup changes nothing


def test_delete(make_store):
    store = make_store()
    (block_id,) = chain(1)
    store.put(block_id, make_block(block_id), FP)
    assert store.delete(block_id) is True
    assert store.delete(block_id) is False
    assert files(store) == [] and store.stats().blocks == 0 and store.stats().bytes == 0


def test_concurrent_puts_of_one_block_store_it_once(make_store):
    store = make_store(fsync=False)
    (block_id,) = chain(1)
    data = make_block(block_id)
    results: list[bool] = []
    threads = [threading.Thread(target=lambda: results.append(store.put(block_id, data, FP))) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sorted(results) == [False] * 7 + [True]
    assert files(store) == [f"{block_id.hex()}.kv"] and store.stats().bytes == len(data)


def test_prefetch_is_advice_only_and_skips_absent_blocks(make_store):
    store = make_store(fsync=False)
    stored, absent = chain(2)
    data = make_block(stored)
    store.put(stored, data, FP)
    store.prefetch([stored, absent])
    assert store.stats().hits == 0 and store.stats().misses == 0  # nothing read, nothing counted
    assert store.get(stored, FP) == data
