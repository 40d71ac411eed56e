"""A cached prefix that ends inside a block: a context's stored tail (its partial last block).

A decode sequence asked to (`seal_tail`) caches its partial last block under the tail id when it
finishes; a later prompt that extends the context loads it as the last block of an external
prefix (`ExternalPrefix.tail_tokens`) and computes only the tokens after it. Greedy output equals
a full recompute on the in-pool and the staged (layerwise) path, the block the tail sits in is then
a full block of the prompt under its full id (bit for bit the same on both paths), and the tail's
id never names it.
"""

from __future__ import annotations

import random

import pytest
import torch

from agentserve.contracts import SamplingParams
from agentserve.engine.engine import LLMEngine
from agentserve.engine.engine_config import EngineConfig
from agentserve.engine.layer_stream import LayerStream
from agentserve.engine.runner import ExternalPrefix
from agentserve.engine.sequence import Sequence
from agentserve.kv.block_hash import block_ids_for, tail_block_id

pytestmark = pytest.mark.unit

BS = 16
FIRST_PROMPT, FIRST_OUTPUT, NEW = 150, 12, 40  # context 162 tokens: 161 computed, 10 full blocks + 1 of tail
SLOT_BYTES = 2 * 4 * 2 * 64 * 4 * BS
GREEDY = SamplingParams(max_tokens=6, ignore_eos=True)


def _engine(tiny_model_dir, **fields) -> LLMEngine:
    return LLMEngine.from_dir(tiny_model_dir, EngineConfig(kv_cache_bytes=200 * SLOT_BYTES, **fields))


@pytest.fixture(scope="module")
def turns(tiny_model_dir):
    """(the first turn's decode engine and sequence, the second turn's prompt, its full-recompute output)."""
    rng = random.Random(11)
    decode = _engine(tiny_model_dir)
    seq = decode.generate(
        [rng.randrange(5, 8192) for _ in range(FIRST_PROMPT)], SamplingParams(max_tokens=FIRST_OUTPUT, ignore_eos=True)
    )
    # seal_tail is a request flag; `generate` has none, so the first turn goes through add_request
    decode2 = _engine(tiny_model_dir)
    sealed = decode2.add_request(seq.token_ids[:FIRST_PROMPT], seq.params, seal_tail=True)
    while not sealed.finished:
        decode2.step()
    assert sealed.token_ids == seq.token_ids
    prompt = sealed.token_ids + [rng.randrange(5, 8192) for _ in range(NEW)]
    reference = _engine(tiny_model_dir).generate(prompt, GREEDY).output_token_ids
    return decode2, sealed, prompt, reference


def _tail_kv(decode: LLMEngine, seq: Sequence) -> tuple[torch.Tensor, torch.Tensor]:
    assert seq.tail_id is not None
    return decode.pool.read_blocks([decode.blocks.lookup(seq.tail_id)])


def test_a_finished_sequence_caches_its_tail_under_the_tail_id(turns):
    decode, seq, _, _ = turns
    computed = FIRST_PROMPT + FIRST_OUTPUT - 1  # the last sampled token has no KV yet
    full, k = divmod(computed, BS)
    assert (full, k) == (10, 1)
    ids = block_ids_for(seq.token_ids, BS, decode.fingerprint, "")
    assert seq.tail_id == tail_block_id(ids[full - 1], decode.fingerprint, "", seq.token_ids[full * BS : computed], BS)
    assert decode.blocks.lookup(seq.tail_id) is not None
    assert decode.blocks.stats()["used"] == 0  # cached, evictable like any finished block
    assert seq.tail_id not in ids


def test_a_sequence_without_seal_tail_caches_no_tail(tiny_model_dir):
    engine = _engine(tiny_model_dir)
    seq = engine.generate(list(range(5, 5 + 40)), SamplingParams(max_tokens=3, ignore_eos=True))
    assert seq.tail_id is None
    assert engine.blocks.stats()["resident_blocks"] == 2  # the two full blocks only


def _prefix_blocks(decode: LLMEngine, prompt: list[int], full: int) -> tuple[torch.Tensor, torch.Tensor]:
    ids = block_ids_for(prompt, BS, decode.fingerprint, "")[:full]
    return decode.pool.read_blocks([decode.blocks.lookup(i) for i in ids])


def test_in_pool_prefill_over_a_tail_equals_a_full_recompute(tiny_model_dir, turns):
    decode, seq, prompt, reference = turns
    engine = _engine(tiny_model_dir)
    full_k, full_v = _prefix_blocks(decode, prompt, 10)
    tail_k, tail_v = _tail_kv(decode, seq)
    k, v = torch.cat([full_k, tail_k], 1), torch.cat([full_v, tail_v], 1)
    external = ExternalPrefix(11, lambda layer: (k[layer], v[layer]), tail_tokens=1)
    out = engine.generate(prompt, GREEDY, external_prefix=external)
    assert out.output_token_ids == reference
    assert out.num_cached_tokens == 161
    ids = block_ids_for(prompt, BS, engine.fingerprint, "")
    assert engine.blocks.cached_prefix(ids) == len(ids)  # block 10 sealed under its full id
    assert engine.blocks.lookup(seq.tail_id) is None  # the tail's id names nothing here


def test_staged_prefill_over_a_tail_equals_a_full_recompute_and_the_in_pool_kv(tiny_model_dir, turns):
    decode, seq, prompt, reference = turns
    full_k, full_v = _prefix_blocks(decode, prompt, 10)
    tail_k, tail_v = _tail_kv(decode, seq)
    stream = LayerStream(4, 11, (BS, 2, 64), torch.float32)
    stream.put(0, range(4), torch.cat([full_k, tail_k], 1), torch.cat([full_v, tail_v], 1))
    staged = _engine(tiny_model_dir, layerwise=True)
    first = SamplingParams(max_tokens=1, ignore_eos=True)
    out = staged.generate(prompt, first, external_prefix=stream.external(11, tail_tokens=1))
    assert out.output_token_ids == reference[:1]
    assert out.num_cached_tokens == 161
    stats = staged.blocks.stats()
    # the tail's block and the new ones are computed here and cached under their full ids
    assert (stats["used"], stats["resident_blocks"]) == (0, len(prompt) // BS - 10)
    in_pool = _engine(tiny_model_dir)
    external = ExternalPrefix(11, lambda layer: stream.layer(layer), tail_tokens=1)
    in_pool.generate(prompt, first, external_prefix=external)
    computed = block_ids_for(prompt, BS, staged.fingerprint, "")[10:]
    assert staged.export_blocks(computed) == in_pool.export_blocks(computed)


def test_staged_prefill_over_resident_blocks_and_a_tail(tiny_model_dir, turns):
    decode, seq, prompt, reference = turns
    staged = _engine(tiny_model_dir, layerwise=True)
    staged.generate(prompt[:165], SamplingParams(max_tokens=1, ignore_eos=True))  # the 10 full blocks resident
    tail_k, tail_v = _tail_kv(decode, seq)
    stream = LayerStream(4, 1, (BS, 2, 64), torch.float32)
    stream.put(0, range(4), tail_k, tail_v)
    out = staged.generate(prompt, SamplingParams(max_tokens=1, ignore_eos=True), external_prefix=stream.external(11, 1))
    assert out.output_token_ids == reference[:1]
    assert out.num_cached_tokens == 161


def test_a_tail_past_a_resident_full_block_is_not_used(tiny_model_dir, turns):
    _, seq, prompt, reference = turns
    engine = _engine(tiny_model_dir)
    engine.generate(prompt[:180], SamplingParams(max_tokens=1, ignore_eos=True))  # block 10 resident whole
    never = ExternalPrefix(11, lambda layer: pytest.fail("a resident block is not loaded"), 10, tail_tokens=1)
    out = engine.generate(prompt, GREEDY, external_prefix=never)
    assert out.output_token_ids == reference
    assert out.num_cached_tokens == 11 * BS


def test_external_prefix_tail_bounds():
    with pytest.raises(ValueError, match="tail_tokens"):
        ExternalPrefix(0, lambda layer: (torch.zeros(0), torch.zeros(0)), tail_tokens=3)
    external = ExternalPrefix(3, lambda layer: (torch.zeros(0), torch.zeros(0)), tail_tokens=5)
    assert (external.full_blocks, external.num_tokens(16)) == (2, 37)
    with pytest.raises(ValueError, match="below the block size"):
        external.num_tokens(4)


def test_tail_ids_never_equal_full_block_ids():
    tokens = list(range(5, 5 + 2 * BS))
    full = block_ids_for(tokens, BS, "fp", "t")
    assert tail_block_id(full[0], "fp", "t", tokens[BS : 2 * BS - 1], BS) not in full
    assert tail_block_id(full[0], "fp", "t", tokens[BS : BS + 3], BS) != tail_block_id(
        full[0], "fp", "t", tokens[BS : BS + 4], BS
    )
    for bad in ([], tokens[:BS]):
        with pytest.raises(ValueError, match="a tail holds 1 to 15 tokens"):
            tail_block_id(None, "fp", "t", bad, BS)
