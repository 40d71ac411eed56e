"""FP8 KV (`kv_dtype: fp8_e4m3`): whatever path the cached KV takes (the prefix cache after a decode,
FP8 blocks exported and imported, an external prefix loaded layer by layer, a staged layerwise
prefill), greedy output equals a full recompute with FP8 KV, and the blocks leave as FP8 bytes."""

from __future__ import annotations

import random

import pytest
import torch

from agentserve.contracts import SamplingParams
from agentserve.engine.engine import LLMEngine
from agentserve.engine.engine_config import EngineConfig
from agentserve.engine.runner import ExternalPrefix
from agentserve.kv.block_format import deserialize_blocks, read_header
from agentserve.kv.fp8 import round_to_fp8

pytestmark = pytest.mark.unit

PROMPT_LEN, CACHED, NEW, BS = 600, 576, 32, 16
GREEDY = SamplingParams(max_tokens=NEW, ignore_eos=True)
FP8 = {"kv_dtype": "fp8_e4m3"}


def _engine(tiny_model_dir, **fields) -> LLMEngine:
    return LLMEngine.from_dir(tiny_model_dir, EngineConfig(**{**FP8, **fields}))


@pytest.fixture(scope="module")
def prompt():
    rng = random.Random(42)
    return [rng.randrange(5, 8192) for _ in range(PROMPT_LEN)]


@pytest.fixture(scope="module")
def reference(tiny_model_dir, prompt):
    """Greedy output of a full recompute with FP8 KV."""
    seq = _engine(tiny_model_dir, prefix_cache=False).generate(prompt, GREEDY)
    assert seq.num_cached_tokens == 0
    return seq.output_token_ids


@pytest.fixture(scope="module")
def source(tiny_model_dir, prompt):
    """An FP8 engine that computed the prompt's first CACHED tokens (and a different tail)."""
    engine = _engine(tiny_model_dir)
    engine.generate(prompt[:CACHED] + [7] * 20, SamplingParams(max_tokens=1))
    return engine


def test_the_pool_holds_fp8_values_that_differ_from_full_precision(tiny_model_dir, prompt, source, reference):
    assert len(set(reference)) >= 8  # a degenerate continuation would make the parity checks vacuous
    full = LLMEngine.from_dir(tiny_model_dir)
    full.generate(prompt[:CACHED] + [7] * 20, SamplingParams(max_tokens=1))
    ids = source.block_ids_for(prompt)[: CACHED // BS]
    k8, v8 = source.pool.read_blocks([source.blocks.lookup(i) for i in ids])
    k32, _ = full.pool.read_blocks([full.blocks.lookup(i) for i in ids])
    assert torch.equal(round_to_fp8(k8), k8) and torch.equal(round_to_fp8(v8), v8)
    assert not torch.equal(k8, k32)


def test_cache_hit_matches_fp8_recompute(prompt, source, reference):
    seq = source.generate(prompt, GREEDY)
    assert seq.num_cached_tokens == CACHED
    assert seq.output_token_ids == reference


def test_next_turn_over_decoded_tokens_matches_fp8_recompute(tiny_model_dir, prompt):
    """Decode appends into partly filled blocks; a token's FP8 value must not depend on the tokens
    written after it, or the next turn's cached blocks would differ from its recompute."""
    engine = _engine(tiny_model_dir)
    first = engine.generate(prompt[:300], SamplingParams(max_tokens=37, ignore_eos=True))
    turn = first.token_ids + [11, 12, 13] * 7
    cached = engine.generate(turn, GREEDY)
    assert cached.num_cached_tokens >= 320
    recomputed = _engine(tiny_model_dir, prefix_cache=False).generate(turn, GREEDY)
    assert cached.output_token_ids == recomputed.output_token_ids


def test_exported_blocks_are_fp8_and_import_matches_fp8_recompute(tiny_model_dir, prompt, source, reference):
    ids = source.block_ids_for(prompt)[: CACHED // BS]
    data = source.export_blocks(ids)
    assert read_header(data).kv_dtype == "fp8_e4m3"
    full = source.export_blocks(ids, kv_dtype="native")  # fp32: 4 bytes a value against 1 + row scales
    assert len(data) / len(full) < 0.27
    target = _engine(tiny_model_dir)
    assert target.import_blocks(data) == len(ids)
    slots = [target.blocks.lookup(i) for i in ids]
    assert torch.equal(target.pool.read_blocks(slots)[0], source.pool.read_blocks(slots_of(source, ids))[0])
    seq = target.generate(prompt, GREEDY)
    assert seq.num_cached_tokens == CACHED
    assert seq.output_token_ids == reference


def slots_of(engine: LLMEngine, ids: list[bytes]) -> list[int]:
    return [engine.blocks.lookup(i) for i in ids]  # type: ignore[misc]


def _layers_of(data: bytearray, fingerprint: str):
    def load_layer(layer: int):
        blocks = deserialize_blocks(data, expected_fingerprint=fingerprint, layers=range(layer, layer + 1))
        return blocks.k[0], blocks.v[0]

    return load_layer


def test_external_prefix_matches_fp8_recompute(tiny_model_dir, prompt, source, reference):
    data = source.export_blocks(source.block_ids_for(prompt)[: CACHED // BS])
    target = _engine(tiny_model_dir)
    external = ExternalPrefix(CACHED // BS, _layers_of(data, source.fingerprint))
    seq = target.generate(prompt, GREEDY, external_prefix=external)
    assert seq.num_cached_tokens == CACHED
    assert seq.output_token_ids == reference


def test_staged_prefill_hands_off_the_in_pool_kv_bit_for_bit(tiny_model_dir, prompt, source, reference):
    """A layerwise prefill (a DualPath prefill engine's) over FP8 blocks: the KV it computes and
    hands off is the in-pool prefill's over the same blocks, bit for bit, and its first token the
    recompute's."""
    ids = source.block_ids_for(prompt)
    data = source.export_blocks(ids[: CACHED // BS])
    staged = _engine(tiny_model_dir, layerwise=True)
    external = ExternalPrefix(CACHED // BS, _layers_of(data, source.fingerprint))
    first = staged.generate(prompt, SamplingParams(max_tokens=1, ignore_eos=True), external_prefix=external)
    assert first.output_token_ids == reference[:1]
    in_pool = _engine(tiny_model_dir)
    in_pool.import_blocks(data)
    in_pool.generate(prompt, SamplingParams(max_tokens=1, ignore_eos=True))
    computed = ids[CACHED // BS : PROMPT_LEN // BS]
    assert computed
    handed, expected = (deserialize_blocks(e.export_blocks(computed)) for e in (staged, in_pool))
    assert handed.header.kv_dtype == "fp8_e4m3"
    assert torch.equal(handed.k, expected.k) and torch.equal(handed.v, expected.v)


def test_kv_dtype_is_checked_by_name():
    with pytest.raises(ValueError, match="kv_dtype must be one of auto, fp8_e4m3"):
        EngineConfig(kv_dtype="int8")  # type: ignore[arg-type]


def test_an_emulated_engine_charges_the_targets_fp8_bytes(tiny_model_dir):
    from agentserve.engine.emulation_config import EmulationConfig

    emulation = EmulationConfig(target_model="qwen2.5-32b", weight_shards=2)
    full, fp8 = (
        LLMEngine.emulated(tiny_model_dir, EngineConfig(compute="emulated", emulation=emulation, kv_dtype=kv_dtype))
        for kv_dtype in ("auto", "fp8_e4m3")
    )
    assert full.pool.bytes_per_slot == 16 * 262_144
    assert fp8.pool.bytes_per_slot == 16 * 131_584  # what the NICs and the store are charged per block
    assert fp8.pool.num_slots > 1.9 * full.pool.num_slots
