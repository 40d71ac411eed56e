import random
import threading

import pytest

from agentserve.kv.block_format import payload_range, read_header
from agentserve.kvstore.store import KVStore
from tests.support.kv_blocks import FP, block_size, chain, make_block

pytestmark = pytest.mark.unit

# The readers stop once this many reads hit and missed: the race runs for a count of reads, not
# for a time, so a slow machine checks as much as a fast one.
ENOUGH_HITS, ENOUGH_MISSES = 300, 100


def test_readers_see_a_block_whole_or_not_at_all_while_writers_evict(tmp_path):
    ids = chain(40, salt="concurrency")
    blocks = {b: make_block(b, seed=i) for i, b in enumerate(ids)}
    store = KVStore.open(tmp_path, dram_budget_bytes=3 * block_size(), ssd_budget_bytes=8 * block_size(), fsync=False)
    stop = threading.Event()
    problems: list[str] = []
    reads = [0, 0]  # attempts, hits

    def writer(seed: int) -> None:
        rng = random.Random(seed)
        while not stop.is_set():
            batch = rng.sample(ids, 3)
            store.put_many(FP, [(b, blocks[b]) for b in batch])
            if rng.random() < 0.1:
                store.delete(batch[:1])

    def reader(seed: int) -> None:
        rng = random.Random(seed)
        while not stop.is_set():
            block_id = rng.choice(ids)
            layers = range(1, 3) if rng.random() < 0.5 else None
            got = store.read(block_id, FP, layers)
            reads[0] += 1
            if got is None:
                continue
            reads[1] += 1
            expected = blocks[block_id]
            if layers is not None:
                offset, length = payload_range(read_header(expected), 1, 3)
                expected = expected[: got.header_size] + expected[offset : offset + length]
            if got.data != expected:
                problems.append(f"block {block_id.hex()} read back different bytes from {got.tier.name}")
            if reads[1] >= ENOUGH_HITS and reads[0] - reads[1] >= ENOUGH_MISSES:
                stop.set()

    threads = [threading.Thread(target=writer, args=(i,)) for i in range(2)]
    threads += [threading.Thread(target=reader, args=(10 + i,)) for i in range(3)]
    try:
        for t in threads:
            t.start()
        stop.wait()  # a reader sets it once enough hits and misses were read
    finally:
        stop.set()
        for t in threads:
            t.join()
    stats = store.stats()
    store.close()
    assert problems == []
    assert reads[1] >= ENOUGH_HITS and reads[0] - reads[1] >= ENOUGH_MISSES
    assert stats.ssd.evictions > 0 and stats.dram.evictions > 0 and stats.corrupt_dropped == 0
    assert stats.ssd.peak_bytes <= 8 * block_size() and stats.dram.peak_bytes <= 3 * block_size()
