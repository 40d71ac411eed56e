"""A KV store outage during a prefill on a real engine: loads fall back to computing the blocks not
loaded (first token identical to a full recompute), persists are skipped and counted, and only
outages are forgiven (a store refusing a bad block still fails the call)."""

from __future__ import annotations

import asyncio
import dataclasses

import grpc
import pytest

from agentserve.contracts import PrefillRequest, PrefillResult, SamplingParams
from agentserve.engine.async_engine import AsyncEngine
from agentserve.engine.engine import LLMEngine
from agentserve.engine_service.kv_moves import STORE_SKIPPED_BLOCKS, KVMover
from agentserve.kvstore.client import store_down
from agentserve.prefill.worker import PrefillWorker
from tests.support.engine_pool import CONFIG, Store

pytestmark = pytest.mark.unit

BLOCKS = 6
PROMPT = [(11 * i) % 170 + 5 for i in range(BLOCKS * 16 + 5)]


def rpc_error(code: grpc.StatusCode) -> grpc.aio.AioRpcError:
    return grpc.aio.AioRpcError(code, grpc.aio.Metadata(), grpc.aio.Metadata(), details=f"store {code.name}")


class FailingStore(Store):
    """Serves `serve` blocks of what it holds, then fails with `code`; every read and put fails with `code`."""

    def __init__(self, blocks: dict[bytes, bytes], serve: int, code: grpc.StatusCode) -> None:
        super().__init__(blocks)
        self.serve, self.code = serve, code

    async def get(self, fingerprint, ids):
        for block_id in ids[: self.serve]:
            yield block_id, self.blocks[block_id]
        raise rpc_error(self.code)

    async def read(self, fingerprint, ids, layers=None):  # a layerwise load's reads
        raise rpc_error(self.code)
        yield

    async def put(self, fingerprint, blocks):
        raise rpc_error(self.code)


@pytest.fixture(scope="module")
def stored(tiny_model_dir) -> tuple[int, dict[bytes, bytes]]:
    """(the first token of a full recompute of PROMPT, its full blocks as the store held them)."""
    engine = LLMEngine.from_dir(tiny_model_dir, CONFIG)
    seq = engine.generate(PROMPT, SamplingParams(max_tokens=1))
    ids = engine.block_ids_for(PROMPT)
    return seq.output_token_ids[0], {block_id: bytes(engine.export_blocks([block_id])) for block_id in ids}


def prefill_against(tiny_model_dir, store: Store, hits: int = BLOCKS, layerwise: bool = False) -> PrefillResult:
    """A prefill of PROMPT on a fresh engine told its first `hits` full blocks are store hits."""
    engine = AsyncEngine(LLMEngine.from_dir(tiny_model_dir, dataclasses.replace(CONFIG, layerwise=layerwise)))
    engine.start()
    try:

        async def main() -> PrefillResult:
            mover = KVMover(engine, "prefill-0", store, "store:0")
            request = PrefillRequest("r", "s", "", PROMPT, SamplingParams(max_tokens=1), store_hit_blocks=hits)
            return await PrefillWorker(engine, mover).prefill(request)

        return asyncio.run(main())
    finally:
        engine.stop()


def skipped(op: str) -> float:
    return STORE_SKIPPED_BLOCKS.labels(op)._value.get()


@pytest.mark.parametrize("code", [grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.DEADLINE_EXCEEDED])
@pytest.mark.parametrize("served", [0, 2])
def test_a_store_down_mid_load_leaves_the_rest_to_compute_and_skips_the_persist(
    tiny_model_dir, stored, spans, code, served
):
    first_token, blocks = stored
    loads, persists = skipped("load"), skipped("persist")
    result = prefill_against(tiny_model_dir, FailingStore(blocks, served, code))
    assert result.first_token == first_token  # token-exact: the blocks not loaded were computed
    assert (result.loaded_blocks, result.cached_tokens, result.persisted_blocks) == (served, served * 16, 0)
    assert skipped("load") - loads == BLOCKS - served
    assert skipped("persist") - persists == 0  # every block was a hit: nothing new to persist
    [span] = [s for s in spans.get_finished_spans() if s.name == "prefill"]
    assert span.attributes["kv.store_skipped.load"] == BLOCKS - served


def test_a_persist_the_store_cannot_take_is_skipped_and_counted(tiny_model_dir, stored, spans):
    first_token, _ = stored
    persists = skipped("persist")
    result = prefill_against(tiny_model_dir, FailingStore({}, 0, grpc.StatusCode.UNAVAILABLE), hits=0)
    assert (result.first_token, result.loaded_blocks, result.persisted_blocks) == (first_token, 0, 0)
    assert skipped("persist") - persists == BLOCKS
    [span] = [s for s in spans.get_finished_spans() if s.name == "prefill"]
    assert span.attributes["kv.store_skipped.persist"] == BLOCKS


def test_a_store_refusing_the_blocks_still_fails_the_prefill(tiny_model_dir, stored):
    _, blocks = stored
    with pytest.raises(grpc.aio.AioRpcError) as err:
        prefill_against(tiny_model_dir, FailingStore(blocks, 0, grpc.StatusCode.INVALID_ARGUMENT))
    assert err.value.code() is grpc.StatusCode.INVALID_ARGUMENT


def test_only_unavailable_and_deadline_exceeded_mean_the_store_is_down():
    down = {code for code in grpc.StatusCode if store_down(rpc_error(code))}
    assert down == {grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.DEADLINE_EXCEEDED}
    assert not store_down(ConnectionError("not a gRPC status"))


def test_a_layerwise_prefill_computes_what_a_dead_store_did_not_stream(tiny_model_dir, stored, spans):
    first_token, blocks = stored
    loads = skipped("load")
    result = prefill_against(tiny_model_dir, FailingStore(blocks, 0, grpc.StatusCode.UNAVAILABLE), layerwise=True)
    assert (result.first_token, result.loaded_blocks, result.cached_tokens) == (first_token, 0, 0)
    assert skipped("load") - loads == BLOCKS
