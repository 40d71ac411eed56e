"""Prefix-cache parity: whatever path the cached KV takes, greedy output equals a full recompute."""

from __future__ import annotations

import pytest

from agentserve.contracts import SamplingParams
from agentserve.engine.engine import LLMEngine
from agentserve.engine.engine_config import EngineConfig
from agentserve.engine.runner import ExternalPrefix
from agentserve.kv.block_format import deserialize_blocks
from tests.support.device import TEST_DEVICE

pytestmark = pytest.mark.unit

PROMPT_LEN, CACHED, NEW = 1000, 960, 64
GREEDY = SamplingParams(max_tokens=NEW, ignore_eos=True)
ON_DEVICE = EngineConfig(device=TEST_DEVICE)  # cpu in CI; scripts/gpu_check.sh runs these on cuda


@pytest.fixture(scope="module")
def prompt(tiny_model_dir):
    import random

    rng = random.Random(42)
    return [rng.randrange(5, 8192) for _ in range(PROMPT_LEN)]


@pytest.fixture(scope="module")
def reference(tiny_model_dir, prompt):
    engine = LLMEngine.from_dir(tiny_model_dir, EngineConfig(prefix_cache=False, device=TEST_DEVICE))
    seq = engine.generate(prompt, GREEDY)
    assert seq.num_cached_tokens == 0
    return seq.output_token_ids


def _warm(engine: LLMEngine, prompt: list[int]) -> None:
    # Same first 960 tokens, different tail: only the shared prefix can hit.
    engine.generate(prompt[:CACHED] + [7] * 20, SamplingParams(max_tokens=1))


def test_reference_is_not_degenerate(reference):
    # A continuation that repeats one token would make every parity check below vacuous.
    assert len(reference) == NEW and len(set(reference)) >= 8


def test_cache_hit_matches_full_recompute(tiny_model_dir, prompt, reference):
    engine = LLMEngine.from_dir(tiny_model_dir, ON_DEVICE)
    _warm(engine, prompt)
    seq = engine.generate(prompt, GREEDY)
    assert seq.num_cached_tokens == CACHED
    assert seq.output_token_ids == reference


def test_serialized_blocks_match_full_recompute(tiny_model_dir, prompt, reference):
    source = LLMEngine.from_dir(tiny_model_dir, ON_DEVICE)
    _warm(source, prompt)
    ids = source.block_ids_for(prompt)[: CACHED // 16]
    data = source.export_blocks(ids)
    target = LLMEngine.from_dir(tiny_model_dir, ON_DEVICE)
    assert target.import_blocks(data) == len(ids)
    seq = target.generate(prompt, GREEDY)
    assert seq.num_cached_tokens == CACHED
    assert seq.output_token_ids == reference


def test_layerwise_prefill_matches_full_recompute(tiny_model_dir, prompt, reference):
    source = LLMEngine.from_dir(tiny_model_dir, ON_DEVICE)
    _warm(source, prompt)
    data = source.export_blocks(source.block_ids_for(prompt)[: CACHED // 16])
    loaded: list[int] = []

    def load_layer(layer: int):
        loaded.append(layer)
        blocks = deserialize_blocks(data, expected_fingerprint=source.fingerprint, layers=range(layer, layer + 1))
        return blocks.k[0], blocks.v[0]

    target = LLMEngine.from_dir(tiny_model_dir, ON_DEVICE)
    seq = target.generate(prompt, GREEDY, external_prefix=ExternalPrefix(CACHED // 16, load_layer))
    assert loaded == list(range(target.model_config.num_hidden_layers))
    assert seq.num_cached_tokens == CACHED
    assert seq.output_token_ids == reference


@pytest.mark.parametrize("prompt_len, max_tokens", [(200, 40), (200, 24)])
def test_next_turn_hits_every_full_block_of_prompt_and_output(tiny_model_dir, prompt, prompt_len, max_tokens):
    # 200 + 24 = 224 = 14 blocks: the last sampled token completes a block, so the engine must
    # compute that token's KV at finish for the next turn to hit it.
    engine = LLMEngine.from_dir(tiny_model_dir, ON_DEVICE)
    first = engine.generate(prompt[:prompt_len], SamplingParams(max_tokens=max_tokens, ignore_eos=True))
    second = engine.generate(first.token_ids + [11, 12, 13], SamplingParams(max_tokens=4, ignore_eos=True))
    assert second.num_cached_tokens == len(first.token_ids) // 16 * 16


def test_tenant_salt_isolates_cache(tiny_model_dir, prompt):
    engine = LLMEngine.from_dir(tiny_model_dir, ON_DEVICE)
    engine.generate(prompt[:320], SamplingParams(max_tokens=1), tenant_salt="alice")
    assert engine.generate(prompt[:320], SamplingParams(max_tokens=1), tenant_salt="bob").num_cached_tokens == 0
    # 20 whole cached blocks: only the last token runs (for its logits), over a copy of its block.
    assert engine.generate(prompt[:320], SamplingParams(max_tokens=1), tenant_salt="alice").num_cached_tokens == 319
