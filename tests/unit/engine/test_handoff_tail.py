"""A prompt's tail handed off with its full blocks: the decode engine computes only the first token.

A prefill asked to (`seal_tail`) caches its prompt's partial last block under the tail id; sent to
a decode engine beside the full blocks, it is found at admission (`LLMEngine._resident_plan`) and
copied into the sequence's block, so the decode's prefill of prompt + first token computes one
token instead of the whole partial block again. Greedy output equals one engine's generate, on the
in-pool and the staged (layerwise) prefill.
"""

from __future__ import annotations

import random

import pytest

from agentserve.contracts import SamplingParams
from agentserve.engine.engine import LLMEngine
from agentserve.engine.engine_config import EngineConfig
from agentserve.engine.layer_stream import LayerStream
from agentserve.kv.block_hash import block_ids_for

pytestmark = pytest.mark.unit

BS = 16
PROMPT = 150  # 9 full blocks and a tail of 6 tokens
SLOT_BYTES = 2 * 4 * 2 * 64 * 4 * BS
FIRST = SamplingParams(max_tokens=1, ignore_eos=True)
GREEDY = SamplingParams(max_tokens=8, ignore_eos=True)
REST = SamplingParams(max_tokens=7, ignore_eos=True)  # after the prefill engine's first token


def _engine(tiny_model_dir, **fields) -> LLMEngine:
    return LLMEngine.from_dir(tiny_model_dir, EngineConfig(kv_cache_bytes=200 * SLOT_BYTES, **fields))


@pytest.fixture(scope="module")
def prompt_and_reference(tiny_model_dir):
    rng = random.Random(5)
    prompt = [rng.randrange(5, 8192) for _ in range(PROMPT)]
    return prompt, _engine(tiny_model_dir).generate(prompt, GREEDY).output_token_ids


def _prefill(engine: LLMEngine, prompt: list[int], **kwargs):
    seq = engine.add_request(prompt, FIRST, seal_tail=True, **kwargs)
    while not seq.finished:
        engine.step()
    return seq


def _handed_off(tiny_model_dir, prefill: LLMEngine, seq, prompt: list[int], tail: bool = True, streamed=None):
    """A decode engine after the handoff of the prompt's full blocks and (`tail`) its tail (those a
    layerwise prefill streamed, never in its pool, from `streamed`, as the worker's handoff sends
    them from the stream)."""
    decode = _engine(tiny_model_dir)
    ids = block_ids_for(prompt, BS, prefill.fingerprint, "")
    assert seq.tail_id is not None and len(ids) == PROMPT // BS
    for block_id in [*ids, seq.tail_id] if tail else ids:
        source = prefill if prefill.blocks.lookup(block_id) is not None or streamed is None else streamed
        decode.import_blocks(source.export_blocks([block_id]))
    return decode


def _decode_after_handoff(tiny_model_dir, prefill: LLMEngine, seq, prompt: list[int], streamed=None):
    """The decode of prompt + first token after the handoff of its full blocks and its tail."""
    decode = _handed_off(tiny_model_dir, prefill, seq, prompt, streamed=streamed)
    out = decode.add_request(seq.token_ids, REST, generated=1)
    while not out.finished:
        decode.step()
    return decode, out


def test_the_decode_of_a_handed_off_tail_computes_only_the_first_token(tiny_model_dir, prompt_and_reference):
    prompt, reference = prompt_and_reference
    prefill = _engine(tiny_model_dir)
    seq = _prefill(prefill, prompt)
    assert seq.output_token_ids == reference[:1]
    decode, out = _decode_after_handoff(tiny_model_dir, prefill, seq, prompt)
    assert out.num_cached_tokens == PROMPT  # every prompt token: 9 blocks and the 6-token tail
    assert [seq.output_token_ids[0], *out.output_token_ids] == reference
    assert decode.blocks.lookup(seq.tail_id) is not None  # copied, not taken: it stays cached


def test_a_staged_prefill_seals_its_tail_too(tiny_model_dir, prompt_and_reference):
    prompt, reference = prompt_and_reference
    source = _engine(tiny_model_dir)
    source.generate(prompt[: 4 * BS + 1], FIRST)  # 4 full blocks to stream layer by layer
    k, v = source.pool.read_blocks(
        [source.blocks.lookup(i) for i in block_ids_for(prompt, BS, source.fingerprint, "")[:4]]
    )
    stream = LayerStream(4, 4, (BS, 2, 64), k.dtype)
    stream.put(0, range(4), k, v)
    staged = _engine(tiny_model_dir, layerwise=True)
    seq = _prefill(staged, prompt, external_prefix=stream.external(4))
    assert seq.output_token_ids == reference[:1]
    _, out = _decode_after_handoff(tiny_model_dir, staged, seq, prompt, streamed=source)
    assert out.num_cached_tokens == PROMPT
    assert [seq.output_token_ids[0], *out.output_token_ids] == reference


def test_without_the_tail_the_decode_recomputes_the_partial_block(tiny_model_dir, prompt_and_reference):
    prompt, reference = prompt_and_reference
    prefill = _engine(tiny_model_dir)
    seq = _prefill(prefill, prompt)
    out = _handed_off(tiny_model_dir, prefill, seq, prompt, tail=False).generate(seq.token_ids, REST)
    assert out.num_cached_tokens == (PROMPT // BS) * BS
    assert [seq.output_token_ids[0], *out.output_token_ids] == reference


def test_a_tail_evicted_between_plan_and_admission_is_computed_instead(tiny_model_dir, prompt_and_reference):
    prompt, reference = prompt_and_reference
    prefill = _engine(tiny_model_dir)
    seq = _prefill(prefill, prompt)
    decode = _handed_off(tiny_model_dir, prefill, seq, prompt)
    out = decode.add_request(seq.token_ids, REST, generated=1)
    plan = decode._plan(out)
    assert plan.tail_tokens == PROMPT % BS
    decode.blocks.drop([seq.tail_id])  # what an earlier admission's allocation can do in the same step
    assert decode._admit(out, plan)
    assert (plan.tail_id, plan.cached_tokens(BS)) == (None, PROMPT // BS * BS)
    decode.blocks.free(out.slots)
    out.slots = []
    while not out.finished:
        decode.step()
    assert [seq.output_token_ids[0], *out.output_token_ids] == reference
