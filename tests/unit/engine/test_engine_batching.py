"""Continuous batching: decoding sequences of different lengths together equals decoding each alone."""

from __future__ import annotations

import random

import pytest

from agentserve.contracts import SamplingParams
from agentserve.engine.engine import LLMEngine
from agentserve.engine.engine_config import EngineConfig

pytestmark = pytest.mark.unit

LENGTHS = (5, 17, 48, 131)
PARAMS = SamplingParams(max_tokens=20, ignore_eos=True)


def _prompts():
    rng = random.Random(9)
    return [[rng.randrange(5, 8192) for _ in range(n)] for n in LENGTHS]


def test_batched_decode_equals_each_alone(tiny_model_dir):
    batched = LLMEngine.from_dir(tiny_model_dir, EngineConfig(prefix_cache=False))
    seqs = [batched.add_request(p, PARAMS) for p in _prompts()]
    batch_sizes = []
    while batched.has_unfinished():
        batch_sizes.append(len(batched.step()))
    assert max(batch_sizes) == len(LENGTHS)  # they really decoded together
    for prompt, seq in zip(_prompts(), seqs):
        alone = LLMEngine.from_dir(tiny_model_dir, EngineConfig(prefix_cache=False)).generate(prompt, PARAMS)
        assert seq.output_token_ids == alone.output_token_ids


def test_preemption_under_memory_pressure_keeps_outputs(tiny_model_dir):
    # A pool of 24 blocks cannot hold all four sequences to the end: some get preempted and
    # recomputed, and their outputs must not change.
    engine = LLMEngine.from_dir(tiny_model_dir)
    small = LLMEngine(
        engine.model,
        engine.fingerprint,
        EngineConfig(kv_cache_bytes=24 * engine.pool.bytes_per_slot, prefix_cache=False),
    )
    seqs = small.generate_many(_prompts(), SamplingParams(max_tokens=60, ignore_eos=True))
    assert small.num_preemptions > 0
    for prompt, seq in zip(_prompts(), seqs):
        alone = engine.generate(prompt, SamplingParams(max_tokens=60, ignore_eos=True))
        assert seq.output_token_ids == alone.output_token_ids


def test_seeded_sampling_is_reproducible(tiny_model_dir):
    engine = LLMEngine.from_dir(tiny_model_dir)
    prompt = _prompts()[2]
    params = SamplingParams(max_tokens=16, temperature=0.8, top_p=0.9, seed=5, ignore_eos=True)
    a = engine.generate(prompt, params).output_token_ids
    b = engine.generate(prompt, params).output_token_ids
    c = engine.generate(
        prompt, SamplingParams(max_tokens=16, temperature=0.8, top_p=0.9, seed=6, ignore_eos=True)
    ).output_token_ids
    assert a == b and a != c
