"""Layerwise prefill in the engine: an external prefix staged one layer at a time.

Greedy output equals a full recompute; the KV it computes equals the in-pool path's bit for bit;
the pool holds the prefill's resident hits, its new blocks and ceil(blocks / layers) staging slots,
never the external blocks; a failed load is recomputed; a compute-quota batch carries ~layers
times more cached context than a pool that must hold every cached block."""

from __future__ import annotations

import random
import threading

import pytest
import torch

from agentserve.contracts import SamplingParams
from agentserve.engine.engine import LLMEngine
from agentserve.engine.engine_config import EngineConfig
from agentserve.engine.layer_stream import LayerStream
from agentserve.engine.runner import ExternalPrefix

pytestmark = pytest.mark.unit

PROMPT_LEN, CACHED_BLOCKS, BS = 1000, 60, 16
FIRST = SamplingParams(max_tokens=1, ignore_eos=True)
SLOT_BYTES = 2 * 4 * 2 * 64 * 4 * BS  # K and V, 4 layers, 2 kv heads x 64, fp32, a block of 16 tokens


@pytest.fixture(scope="module")
def prompts():
    rng = random.Random(7)
    return [[rng.randrange(5, 8192) for _ in range(PROMPT_LEN)] for _ in range(3)]


@pytest.fixture(scope="module")
def source(tiny_model_dir, prompts):
    """An engine that computed every prompt: the store's stand-in, and the full-recompute reference."""
    engine = LLMEngine.from_dir(tiny_model_dir, EngineConfig(kv_cache_bytes=400 * SLOT_BYTES))
    engine.firsts = [engine.generate(p, FIRST).output_token_ids for p in prompts]  # type: ignore[attr-defined]
    return engine


def _stream(source: LLMEngine, prompt: list[int], first_block: int = 0) -> LayerStream:
    ids = source.block_ids_for(prompt)[first_block:CACHED_BLOCKS]
    k, v = source.pool.read_blocks([source.blocks.lookup(i) for i in ids])
    stream = LayerStream(k.shape[0], len(ids), tuple(k.shape[2:]), k.dtype)
    stream.put(0, range(k.shape[0]), k, v)
    return stream


def _engine(tiny_model_dir, slots: int = 200, **fields) -> LLMEngine:
    return LLMEngine.from_dir(tiny_model_dir, EngineConfig(kv_cache_bytes=slots * SLOT_BYTES, **fields))


def _spy_pool(engine: LLMEngine, external: ExternalPrefix, seen: list[int]) -> ExternalPrefix:
    def load_layer(layer: int):
        seen.append(engine.blocks.stats()["used"])
        return external.load_layer(layer)

    return ExternalPrefix(external.num_blocks, load_layer, external.first_block, external.ready)


def test_staged_prefill_matches_full_recompute_and_holds_one_layer(tiny_model_dir, source, prompts):
    engine = _engine(tiny_model_dir, layerwise=True)
    seen: list[int] = []
    external = _spy_pool(engine, _stream(source, prompts[0]).external(CACHED_BLOCKS), seen)
    seq = engine.generate(prompts[0], FIRST, external_prefix=external)
    assert seq.output_token_ids == source.firsts[0]
    assert seq.num_cached_tokens == CACHED_BLOCKS * BS
    new_blocks, staging = -(-PROMPT_LEN // BS) - CACHED_BLOCKS, CACHED_BLOCKS // 4
    assert seen == [new_blocks + staging] * 4  # 3 + 15, not the 63 blocks of the whole prompt
    stats = engine.blocks.stats()
    # only the computed blocks stay cached here; the loaded ones were never in the pool
    assert (stats["used"], stats["resident_blocks"]) == (0, PROMPT_LEN // BS - CACHED_BLOCKS)


def test_staged_kv_equals_the_in_pool_path_bit_for_bit(tiny_model_dir, source, prompts):
    staged, in_pool = _engine(tiny_model_dir, layerwise=True), _engine(tiny_model_dir)
    for engine in (staged, in_pool):
        engine.generate(prompts[1], FIRST, external_prefix=_stream(source, prompts[1]).external(CACHED_BLOCKS))
    computed = source.block_ids_for(prompts[1])[CACHED_BLOCKS:]
    a, b = staged.export_blocks(computed), in_pool.export_blocks(computed)
    assert a == b


def test_resident_hits_and_external_blocks_are_staged_together(tiny_model_dir, source, prompts):
    engine = _engine(tiny_model_dir, layerwise=True)
    engine.generate(prompts[2][:330], FIRST)  # 20 full blocks resident (hits), the rest external
    seen: list[int] = []
    external = _spy_pool(engine, _stream(source, prompts[2], first_block=20).external(CACHED_BLOCKS), seen)
    seq = engine.generate(prompts[2], FIRST, external_prefix=external)
    assert seq.output_token_ids == source.firsts[2]
    assert seen == [20 + 3 + 15] * 4


def test_a_failed_load_is_recomputed(tiny_model_dir, source, prompts):
    engine = _engine(tiny_model_dir, layerwise=True)
    stream = LayerStream(4, CACHED_BLOCKS, (BS, 2, 64), torch.float32)
    stream.fail(RuntimeError("store unavailable"))
    seq = engine.generate(prompts[0], FIRST, external_prefix=stream.external(CACHED_BLOCKS))
    assert seq.output_token_ids == source.firsts[0]
    assert seq.num_cached_tokens == 0
    assert engine.blocks.stats()["used"] == 0


@pytest.mark.parametrize("layerwise, batch", [(False, 1), (True, 3)])
def test_a_quota_batch_carries_layers_times_more_cached_context(tiny_model_dir, source, prompts, layerwise, batch):
    # 80 slots: one prompt's 63 blocks fit, two do not; staged, each needs 3 + 15.
    engine = _engine(
        tiny_model_dir, slots=80, layerwise=layerwise, prefill_batching="compute-quota", prefill_token_budget=4096
    )
    seqs = [engine.add_request(p, FIRST, external_prefix=_stream(source, p).external(CACHED_BLOCKS)) for p in prompts]
    assert engine.step() == seqs[:batch]
    while engine.has_unfinished():
        engine.step()
    assert [s.output_token_ids for s in seqs] == source.firsts


def test_a_token_budget_bounds_the_batch(tiny_model_dir, source, prompts):
    engine = _engine(tiny_model_dir, prefill_batching="compute-quota", prefill_token_budget=2000)
    seqs = [engine.add_request(p[:900], FIRST) for p in prompts]  # 900 new tokens each: two fit in 2000
    assert engine.step() == seqs[:2]
    assert engine.step() == seqs[2:]


def test_a_prefill_whose_layer_0_has_not_arrived_is_passed_over(tiny_model_dir, source, prompts):
    engine = _engine(tiny_model_dir, layerwise=True)
    full = _stream(source, prompts[0])
    arriving = LayerStream(4, CACHED_BLOCKS, (BS, 2, 64), torch.float32)
    waiting = engine.add_request(prompts[0], FIRST, external_prefix=arriving.external(CACHED_BLOCKS))
    other = engine.add_request(prompts[1][:100], FIRST)
    assert engine.step() == [other]  # its KV is still loading: the next one goes first
    assert engine.step() == [] and list(engine.waiting) == [waiting]
    arriving.put(0, range(4), full.k, full.v)
    assert engine.step() == [waiting]
    assert waiting.output_token_ids == source.firsts[0] and waiting.num_cached_tokens == CACHED_BLOCKS * BS


def test_a_prefill_whose_prefix_is_still_arriving_waits_while_one_with_its_prefix_in_hand_runs(
    tiny_model_dir, source, prompts
):
    engine = _engine(tiny_model_dir, layerwise=True)
    first, second = _stream(source, prompts[0]), _stream(source, prompts[1])
    arriving = LayerStream(4, CACHED_BLOCKS, (BS, 2, 64), torch.float32)
    arriving.put(0, range(2), first.k[:2], first.v[:2])  # layers 0 and 1 in hand, 2 and 3 still loading
    partial = engine.add_request(prompts[0], FIRST, external_prefix=arriving.external(CACHED_BLOCKS))
    loaded = engine.add_request(prompts[1], FIRST, external_prefix=second.external(CACHED_BLOCKS))
    assert engine.step() == [loaded]  # its forward never waits; the other's would hold the engine
    assert list(engine.waiting) == [partial]
    # Alone, a prefill whose layer 0 is in hand runs, waiting per layer as before: here the rest
    # arrives from another thread while the forward waits for layer 2.
    threading.Timer(0.05, lambda: arriving.put(0, range(2, 4), first.k[2:], first.v[2:])).start()
    assert engine.step() == [partial]
    assert partial.output_token_ids == source.firsts[0] and partial.num_cached_tokens == CACHED_BLOCKS * BS
    assert loaded.output_token_ids == source.firsts[1]
