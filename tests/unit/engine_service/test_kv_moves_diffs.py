"""Path A meeting diff blocks: a load restores each against its master as it arrives and the
prefill is token-exact; a diff corrupted on disk reads as missing and the engine computes it."""

from __future__ import annotations

import asyncio

import pytest

from agentserve.contracts import PrefillRequest, PrefillResult, SamplingParams
from agentserve.engine.async_engine import AsyncEngine
from agentserve.engine.engine import LLMEngine
from agentserve.engine.rope import inverse_frequencies
from agentserve.engine_service.kv_moves import KVMover
from agentserve.kv.block_diff import full_block, serialize_diff
from agentserve.kv.block_format import deserialize_blocks
from agentserve.kv.block_header import read_header
from agentserve.kv.rope_shift import RopeShift
from agentserve.kvstore.layout import block_path
from agentserve.kvstore.store import KVStore
from agentserve.prefill.worker import PrefillWorker
from tests.support.engine_pool import CONFIG

pytestmark = pytest.mark.unit

BLOCKS = 6
AS_DIFFS = (2, 3)  # these blocks are stored as diffs against masters 40 positions later
OFFSET = 40
PROMPT = [(13 * i) % 170 + 5 for i in range(BLOCKS * 16 + 5)]


class InProcessStore:
    """A real KVStore behind the async get/put a `KVMover` calls (as `ShardedKVStoreClient` has)."""

    def __init__(self, store: KVStore) -> None:
        self.store = store

    async def get(self, fingerprint, ids):
        for block_id in ids:
            read = self.store.read(block_id, fingerprint)
            if read is None:
                return
            yield block_id, bytes(read.data)

    async def put(self, fingerprint, blocks):
        self.store.put_many(fingerprint, blocks)


@pytest.fixture(scope="module")
def computed(tiny_model_dir):
    """(first token of a full recompute of PROMPT, fingerprint, [(id, block)] for its full blocks,
    [(master id, master, sibling diff)] for the blocks in AS_DIFFS)."""
    engine = LLMEngine.from_dir(tiny_model_dir, CONFIG)
    first = engine.generate(PROMPT, SamplingParams(max_tokens=1)).output_token_ids[0]
    ids = engine.block_ids_for(PROMPT)[:BLOCKS]
    master_ids = engine.block_ids_for(PROMPT, "masters")
    shift = RopeShift(inverse_frequencies(engine.model_config))
    blocks = [(block_id, bytes(engine.export_blocks([block_id]))) for block_id in ids]
    diffs = []
    for i in AS_DIFFS:
        kv = deserialize_blocks(blocks[i][1])
        k, v = kv.k[:, 0], kv.v[:, 0]
        master_k = shift.shift(k, OFFSET)  # the same keys as if computed OFFSET positions later
        master = bytes(full_block(master_k, v, master_ids[i], engine.fingerprint, i * 16 + OFFSET))
        diff = serialize_diff(
            master_k,
            v,
            k,
            v,
            block_id=ids[i],
            master_id=master_ids[i],
            fingerprint=engine.fingerprint,
            position_offset=-OFFSET,
            shift=shift,
        )
        diffs.append((master_ids[i], master, bytes(diff)))
    return first, engine.fingerprint, blocks, diffs


def stored_with_diffs(tmp_path, computed) -> KVStore:
    _, fingerprint, blocks, diffs = computed
    store = KVStore.open(tmp_path, dram_budget_bytes=0, ssd_budget_bytes=64 << 20, fsync=False)
    store.put_many(fingerprint, [(master_id, master) for master_id, master, _ in diffs])
    by_index = dict(zip(AS_DIFFS, diffs))
    store.put_many(fingerprint, [(b, by_index[i][2] if i in by_index else data) for i, (b, data) in enumerate(blocks)])
    return store


def prefill(tiny_model_dir, store: KVStore) -> PrefillResult:
    engine = AsyncEngine(LLMEngine.from_dir(tiny_model_dir, CONFIG))
    engine.start()
    try:

        async def main() -> PrefillResult:
            mover = KVMover(engine, "prefill-0", InProcessStore(store), "store:0")
            request = PrefillRequest("r", "s", "", PROMPT, SamplingParams(max_tokens=1), store_hit_blocks=BLOCKS)
            return await PrefillWorker(engine, mover).prefill(request)

        return asyncio.run(main())
    finally:
        engine.stop()


def test_diff_blocks_are_restored_on_load_and_the_prefill_is_token_exact(tiny_model_dir, tmp_path, computed):
    first, _, blocks, diffs = computed
    store = stored_with_diffs(tmp_path, computed)
    try:
        assert [read_header(store.get(blocks[i][0])).diff is not None for i in range(BLOCKS)] == [
            i in AS_DIFFS for i in range(BLOCKS)
        ]
        result = prefill(tiny_model_dir, store)
    finally:
        store.close()
    assert (result.first_token, result.loaded_blocks, result.cached_tokens) == (first, BLOCKS, BLOCKS * 16)


def test_a_corrupt_diff_reads_as_missing_and_the_engine_computes_from_there(tiny_model_dir, tmp_path, computed):
    first, _, blocks, _ = computed
    store = stored_with_diffs(tmp_path, computed)
    try:
        path = block_path(tmp_path, blocks[AS_DIFFS[1]][0], diff=True)
        data = bytearray(path.read_bytes())
        data[-2] ^= 0x08
        path.write_bytes(data)
        result = prefill(tiny_model_dir, store)
        assert store.stats().corrupt_dropped == 1
    finally:
        store.close()
    assert (result.first_token, result.loaded_blocks) == (first, AS_DIFFS[1])  # token-exact: the rest was computed
