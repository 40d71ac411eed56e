"""PrefillWorker with a stored tail: turn one's decode persists its context's partial last block,
turn two's prefill loads it behind the full hits and computes only the tokens after it, with the
first token a full recompute gives; the tail never stays in the prefill's pool."""

from __future__ import annotations

import asyncio

import pytest

from agentserve.contracts import GenerateRequest, PrefillRequest, SamplingParams
from agentserve.decode.worker import DecodeWorker
from agentserve.engine.async_engine import AsyncEngine
from agentserve.engine.engine import LLMEngine
from agentserve.engine_service.kv_moves import KVMover, Moved
from agentserve.kv.block_hash import block_ids_for, tail_block_id
from agentserve.prefill.worker import PrefillWorker
from tests.support.engine_pool import CONFIG, Store

pytestmark = pytest.mark.unit

FIRST = SamplingParams(max_tokens=1, ignore_eos=True)


def _mover(engine: AsyncEngine, store: Store) -> KVMover:
    mover = KVMover(engine, "engine", store, "store:0")

    async def lacking(decode_address, ids):
        return []

    async def handoff(ids, decode_address, elsewhere=None):
        return Moved()

    mover.lacking, mover.handoff = lacking, handoff
    return mover


def test_a_later_turn_loads_the_stored_tail_and_computes_only_past_it(tiny_model_dir):
    engines = [AsyncEngine(LLMEngine.from_dir(tiny_model_dir, CONFIG)) for _ in range(4)]
    for engine in engines:
        engine.start()
    first_prefill, decode, second_prefill, reference = engines
    store = Store()
    bs = CONFIG.block_size
    try:

        async def main():
            prompt = [(7 * i) % 150 + 7 for i in range(3 * bs + 5)]
            await PrefillWorker(first_prefill, _mover(first_prefill, store)).prefill(
                PrefillRequest("t1", "s", "", prompt, FIRST)
            )
            sampling = SamplingParams(max_tokens=6, ignore_eos=True)
            generate = GenerateRequest("t1", "s", "", prompt + [9], len(prompt), sampling, persist_tail=True)
            tokens = [
                t async for c in DecodeWorker(decode, _mover(decode, store)).generate(generate) for t in c.token_ids
            ]
            history = prompt + [9] + tokens  # 60 tokens: 59 computed, 3 full blocks and a tail of 11
            full, tail_tokens = divmod(len(history) - 1, bs)
            ids = block_ids_for(history, bs, first_prefill.engine.fingerprint, "")
            tail_id = tail_block_id(ids[full - 1], decode.engine.fingerprint, "", history[full * bs : -1], bs)
            assert set(ids[:full]) | {tail_id} <= set(store.blocks)

            second = history + [11, 12, 13, 14, 15]
            request = PrefillRequest("t2", "s", "", second, FIRST, store_hit_blocks=full, store_tail_tokens=tail_tokens)
            result = await PrefillWorker(second_prefill, _mover(second_prefill, store)).prefill(request)
            computed = PrefillWorker(reference, _mover(reference, Store()))
            expected = await computed.prefill(PrefillRequest("ref", "s", "", second, FIRST))
            tail_left = await second_prefill.call(lambda e: e.blocks.lookup(tail_id))
            completed = block_ids_for(second, bs, first_prefill.engine.fingerprint, "")[full]
            return result, expected, (full, tail_tokens), tail_left, completed in store.blocks

        result, expected, (full, tail_tokens), tail_left, persisted_full = asyncio.run(main())
    finally:
        for engine in engines:
            engine.stop()
    assert (full, tail_tokens) == (3, 11)
    assert result.first_token == expected.first_token
    assert result.cached_tokens == full * bs + tail_tokens
    assert result.loaded_blocks == full + 1  # the hits and the tail
    assert tail_left is None  # taken out of the pool: only the block it completed stays, under its full id
    assert persisted_full  # that block, computed here, persisted as every new block is


@pytest.mark.parametrize(
    "hits, tail, error",
    [
        (1, 16, "store_tail_tokens 16 must be below the block size 16"),
        (2, 3, "store_tail_tokens 3 must be below the block size 16 and leave a prompt token after"),
    ],
)
def test_a_tail_that_cannot_be_the_prompts_is_refused(tiny_model_dir, hits, tail, error):
    engine = AsyncEngine(LLMEngine.from_dir(tiny_model_dir, CONFIG))
    engine.start()
    try:
        request = PrefillRequest(
            "r", "s", "", list(range(5, 5 + 35)), FIRST, store_hit_blocks=hits, store_tail_tokens=tail
        )

        async def main():
            await PrefillWorker(engine, _mover(engine, Store())).prefill(request)

        with pytest.raises(ValueError, match=error):
            asyncio.run(main())
    finally:
        engine.stop()
