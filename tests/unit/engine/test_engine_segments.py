"""LLMEngine with segmented prompts: exact reuse gives the full recompute's greedy tokens, reuse
computes a round's masters once, and reused KV never enters the exact prefix cache."""

from __future__ import annotations

import pytest
import torch

from agentserve.contracts import SamplingParams
from agentserve.contracts.segments import EXACT, PrivateSegment, ReusePolicy, SegmentedPrompt, SharedBlock
from agentserve.engine.engine import LLMEngine
from agentserve.engine.engine_config import EngineConfig

pytestmark = pytest.mark.unit

GREEDY = SamplingParams(max_tokens=12, ignore_eos=True)


def _tokens(seed: int, n: int) -> tuple[int, ...]:
    return tuple(torch.randint(300, 8000, (n,), generator=torch.Generator().manual_seed(seed)).tolist())


BLOCKS = [SharedBlock(f"agent-{i}", 0, _tokens(100 + i, 32)) for i in range(3)]


def _prompts(policy: ReusePolicy) -> list[SegmentedPrompt]:
    return [
        SegmentedPrompt(
            (
                PrivateSegment(_tokens(a, 20 + a)),
                *(BLOCKS[(a + i) % 3] for i in range(3)),
                PrivateSegment(_tokens(9, 5)),
            ),
            policy,
        )
        for a in range(3)
    ]


def _generate(engine: LLMEngine, prompts: list[SegmentedPrompt], segmented: bool) -> list[list[int]]:
    seqs = [engine.add_request(p.token_ids, GREEDY, segments=p if segmented else None) for p in prompts]
    while engine.has_unfinished():
        engine.step()
    return [s.output_token_ids for s in seqs]


@pytest.mark.parametrize("policy", [EXACT, ReusePolicy(recompute_fraction=1.0)])
def test_exact_reuse_gives_the_full_recomputes_greedy_tokens(tiny_model_dir, policy: ReusePolicy) -> None:
    prompts = _prompts(policy)
    full = _generate(LLMEngine.from_dir(tiny_model_dir, EngineConfig(prefix_cache=False)), prompts, False)
    engine = LLMEngine.from_dir(tiny_model_dir)
    assert _generate(engine, prompts, True) == full
    assert engine.segmented is not None and engine.segmented.masters_computed == 0


def test_reuse_takes_each_master_once_and_keeps_reused_kv_out_of_the_prefix_cache(tiny_model_dir) -> None:
    engine = LLMEngine.from_dir(tiny_model_dir, EngineConfig(reuse_max_deviation=None))
    prompts = _prompts(ReusePolicy(recompute_fraction=0.25))
    seqs = [engine.add_request(p.token_ids, GREEDY, segments=p) for p in prompts]
    while engine.has_unfinished():
        engine.step()
    assert engine.segmented is not None and engine.segmented.masters_computed == 3
    # The first prompt leads the round (computed in full, exact KV); the others reuse its masters.
    assert [len(s.output_token_ids) for s in seqs] == [12, 12, 12]
    assert [s.exact_kv for s in seqs] == [True, False, False]
    stats = seqs[1].reuse_stats
    assert stats is not None and (stats.shared_tokens, stats.recomputed_shared_tokens) == (96, 24)
    # The same prompt, plain: no block of the reused prefill was sealed, so nothing is cached.
    plain = engine.add_request(prompts[1].token_ids, GREEDY)
    engine.step()
    assert plain.num_cached_tokens == 0


def test_segments_must_be_the_prompts_tokens(tiny_model_dir) -> None:
    engine = LLMEngine.from_dir(tiny_model_dir)
    prompt = _prompts(EXACT)[0]
    with pytest.raises(ValueError, match="segments must hold exactly the prompt's tokens"):
        engine.add_request(prompt.token_ids[:-1], GREEDY, segments=prompt)


def test_masters_are_kept_for_the_newest_two_rounds(tiny_model_dir) -> None:
    engine = LLMEngine.from_dir(tiny_model_dir, EngineConfig(reuse_max_deviation=None))
    assert engine.segmented is not None

    def round_prompt(r: int) -> SegmentedPrompt:
        block = SharedBlock(f"round-{r}", r, _tokens(200 + r, 16))
        return SegmentedPrompt((PrivateSegment(_tokens(r, 8)), block), ReusePolicy(recompute_fraction=0.25))

    for r in range(3):
        _generate(engine, [round_prompt(r)], segmented=True)
        assert sorted(engine.segmented.masters) == [f"round-{i}" for i in range(max(0, r - 1), r + 1)]
