"""Greedy speculative decoding emits a plain decode's tokens, and leaves the pool as a plain decode does.

Both drafters, on the trained tiny model, on prompts whose n-grams repeat (drafts found and kept)
and prompts that do not (no draft: a plain row in the same verify forward), batched together.
"""

from __future__ import annotations

import asyncio
import random

import pytest
import torch

from agentserve.contracts import SamplingParams
from agentserve.engine.async_engine import AsyncEngine, TokenEvent
from agentserve.engine.default_model import ensure_default_model
from agentserve.engine.engine import LLMEngine
from agentserve.engine.engine_config import EngineConfig
from agentserve.engine.speculative.config import SpeculativeConfig

pytestmark = pytest.mark.unit

PARAMS = SamplingParams(max_tokens=24, ignore_eos=True)


def _prompts() -> list[list[int]]:
    rng = random.Random(3)
    span = [rng.randrange(5, 8000) for _ in range(50)]
    return [
        span + span[:12],  # the model tends to continue a repeated span: the n-gram draft matches
        [rng.randrange(5, 8000) for _ in range(23)] + span[5:30] + span[5:9],
        [rng.randrange(5, 8000) for _ in range(37)],  # no repeated bigram: no drafts
        span[:17] + [rng.randrange(5, 8000) for _ in range(70)] + span[:3],
    ]


@pytest.fixture(scope="module")
def model_dir():
    return ensure_default_model()


@pytest.fixture(scope="module")
def plain(model_dir) -> LLMEngine:
    return LLMEngine.from_dir(model_dir)


@pytest.fixture(scope="module")
def expected(plain) -> list[list[int]]:
    """Each prompt's output decoded alone, without speculation."""
    return [plain.generate(p, PARAMS).output_token_ids for p in _prompts()]


def _engine(plain: LLMEngine, method: str, **kwargs: int) -> LLMEngine:
    config = EngineConfig(speculative=SpeculativeConfig(method, **kwargs))  # type: ignore[arg-type]
    return LLMEngine(plain.model, plain.fingerprint, config)


@pytest.mark.parametrize(("method", "k"), [("ngram", 4), ("ngram", 7), ("draft", 3)])
def test_batched_greedy_output_equals_plain_decode(plain, expected, method, k):
    engine = _engine(plain, method, k=k, ngram=2)
    seqs = engine.generate_many(_prompts(), PARAMS)
    assert [s.output_token_ids for s in seqs] == expected
    stats = engine.speculator.stats
    assert stats.accepted > 0  # drafts were really kept, so the step really spanned several tokens
    assert stats.sequence_steps < sum(len(e) for e in expected) - len(expected)


def test_a_batch_mixes_drafted_and_plain_rows(plain, expected):
    engine = _engine(plain, "ngram", k=4, ngram=2)
    seqs = [engine.add_request(p, PARAMS) for p in _prompts()]
    mixed_steps = 0
    while engine.has_unfinished():
        running = list(engine.running)
        drafts = engine.speculator.drafter.propose(running, [4] * len(running))  # a lookup changes nothing
        lengths = [len(d.tokens) for d in drafts]
        mixed_steps += bool(lengths) and 0 in lengths and max(lengths) > 0
        engine.step()
    assert mixed_steps > 0  # some verify forwards held drafted and undrafted sequences together
    assert [s.output_token_ids for s in seqs] == expected


def test_rejected_positions_give_their_slots_back(plain):
    engine = _engine(plain, "draft", k=5)
    for prompt in _prompts():
        engine.add_request(prompt, PARAMS)
    while engine.has_unfinished():
        engine.step()
        for seq in engine.running:  # a block table covers the sequence's tokens and no more
            assert len(seq.slots) == -(-len(seq) // engine.block_size)
    stats = engine.blocks.stats()
    assert stats["used"] == 0 and stats["free"] + stats["cached"] == stats["num_slots"]
    assert engine.speculator.stats.drafted > engine.speculator.stats.accepted  # some were rejected


def test_cached_kv_equals_a_plain_decodes_byte_for_byte(plain):
    """Sealed blocks hold only verified tokens' KV: rejected drafts' rows never reach the cache."""
    reference = LLMEngine(plain.model, plain.fingerprint, EngineConfig())
    engine = _engine(plain, "draft", k=4)
    for prompt in _prompts():
        ours, theirs = engine.generate(prompt, PARAMS), reference.generate(prompt, PARAMS)
        assert engine.kv_ids(ours) == reference.kv_ids(theirs)
        assert engine.export_blocks(engine.kv_ids(ours)) == reference.export_blocks(reference.kv_ids(theirs))


def test_max_tokens_and_stop_tokens_end_a_step_early(plain, expected):
    prompt, full = _prompts()[0], expected[0]
    engine = _engine(plain, "ngram", k=8, ngram=2)
    short = engine.generate(prompt, SamplingParams(max_tokens=5, ignore_eos=True))
    assert short.output_token_ids == full[:5] and short.finish_reason == "length"
    stop = full[9]
    stopped = engine.generate(prompt, SamplingParams(max_tokens=24, ignore_eos=True, stop_token_ids=[stop]))
    assert stopped.output_token_ids == full[: full.index(stop) + 1] and stopped.finish_reason == "stop"


def test_config_names_the_bad_field():
    with pytest.raises(ValueError, match="speculative method must be one of off, ngram, draft"):
        SpeculativeConfig("medusa")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="speculative k"):
        SpeculativeConfig("ngram", k=0)
    with pytest.raises(ValueError, match="speculative ngram"):
        SpeculativeConfig("ngram", ngram=0)
    with pytest.raises(ValueError, match="needs real compute"):
        EngineConfig(compute="emulated", speculative=SpeculativeConfig("ngram"))
    assert not EngineConfig().speculative.enabled  # off by default


def test_draft_layers_must_leave_the_target_deeper(plain):
    layers = plain.model_config.num_hidden_layers
    with pytest.raises(ValueError, match=f"draft_layers must be in \\[1, {layers}\\)"):
        _engine(plain, "draft", draft_layers=layers)


def test_a_stream_carries_every_token_of_a_speculative_step(plain, expected):
    """A step may add several tokens to a sequence: the async engine streams each one, in order,
    the last one alone marked finished."""
    engine = AsyncEngine(_engine(plain, "ngram", k=6, ngram=2))
    prompts = _prompts()

    async def main() -> list[list[TokenEvent]]:
        async def collect(prompt: list[int]) -> list[TokenEvent]:
            return [event async for event in engine.generate(prompt, PARAMS)]

        return await asyncio.gather(*(collect(p) for p in prompts))

    engine.start()
    try:
        streams = asyncio.run(main())
    finally:
        engine.stop()
    assert engine.engine.speculator.stats.accepted > 0
    for want, events in zip(expected, streams):
        assert [e.token_id for e in events] == want
        assert [e.finished for e in events] == [False] * (len(events) - 1) + [True]
        assert events[-1].finish_reason == "length"


def test_verify_rows_are_plain_decode_rows_bit_for_bit(plain):
    """One verify forward (each sequence's context read once for its last token and drafts) gives
    each row the logits a plain decode of that position gives, with sequences of different draft
    lengths in one step (the shorter ones padded)."""
    engine = _engine(plain, "off")
    prompts, k = _prompts()[:3], 5
    seqs = [engine.add_request(p, SamplingParams(max_tokens=k + 2, ignore_eos=True)) for p in prompts]
    while any(s.num_output_tokens == 0 for s in seqs):
        engine.step()
    for seq in seqs:  # room for the draft positions
        for j in range(1, k + 1):
            engine.blocks.append(seq.slots, len(seq) + j)
    drafts = [[7, 300, 41, 9, 1200], [], [55, 66]]
    verified = engine.runner.verify(seqs, drafts)
    for seq, draft, rows in zip(seqs, drafts, verified):
        assert rows.shape[0] == 1 + len(draft)
        prompt_and_first = list(seq.token_ids)
        for j in range(1 + len(draft)):
            seq.token_ids[:] = prompt_and_first + draft[:j]
            assert torch.equal(engine.runner.decode([seq])[0], rows[j])
        seq.token_ids[:] = prompt_and_first
    for seq in seqs:
        engine.abort(seq)
