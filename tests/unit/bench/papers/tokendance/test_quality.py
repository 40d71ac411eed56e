"""The TokenDance quality measurement: the prompt set's shape, the distribution gap, and the
curve's fixed points (fraction 1 is the full recompute)."""

from __future__ import annotations

import math

import pytest
import torch

from agentserve.bench.papers.tokendance.quality import PromptSet, _rank_correlation, measure
from agentserve.engine.loader import load_model
from agentserve.engine.reuse_quality import distribution_gap

pytestmark = pytest.mark.unit


def test_the_gap_is_top1_agreement_and_kl_from_the_full_recompute() -> None:
    full = torch.tensor([[2.0, 0.0], [0.0, 1.0]])
    reused = torch.tensor([[2.0, 0.0], [1.0, 0.0]])
    gap = distribution_gap(full, reused)
    assert gap.top1_agree.tolist() == [True, False]
    p = torch.softmax(torch.tensor([0.0, 1.0], dtype=torch.float64), -1)
    expected = (p * (p.log() - p.flip(0).log())).sum().item()
    assert gap.kl[0].item() == 0.0 and math.isclose(gap.kl[1].item(), expected, rel_tol=1e-12)
    with pytest.raises(ValueError, match="logits shapes differ"):
        distribution_gap(full, reused[:1])


def test_the_prompt_set_is_an_all_gather_with_rotated_block_orders() -> None:
    rounds = PromptSet(agents=3, rounds=2, history_tokens=4, block_tokens=2, tail_tokens=1).build(list(range(100)))
    assert len(rounds) == 2 and all(len(r) == 3 for r in rounds)
    history, blocks, question = rounds[1][2]
    assert history.token_ids == (8, 9, 10, 11)
    assert [b.content_id for b in blocks] == ["r1-agent2", "r1-agent0", "r1-agent1"]
    assert blocks[1].round_index == 1 and blocks[1].token_ids == (21, 22)
    assert question.token_ids == (29,)
    with pytest.raises(ValueError, match="needs 30 tokens of text, the stream has 29"):
        PromptSet(agents=3, rounds=2, history_tokens=4, block_tokens=2, tail_tokens=1).build(list(range(29)))


def test_rank_correlation_orders_and_is_none_when_constant() -> None:
    assert _rank_correlation([0.1, 0.2, 0.3], [1.0, 5.0, 9.0]) == 1.0
    assert _rank_correlation([0.1, 0.2, 0.3], [9.0, 5.0, 1.0]) == -1.0
    assert _rank_correlation([0.0, 0.0], [1.0, 2.0]) is None


def test_fraction_1_is_the_full_recompute_and_a_zero_threshold_falls_every_reused_prompt_back(tiny_model_dir) -> None:
    model, _ = load_model(tiny_model_dir)
    rounds = PromptSet(agents=3, rounds=1, history_tokens=8, block_tokens=8, tail_tokens=4).build(list(range(300, 400)))
    exact = measure(model, rounds, 1.0, 4, max_deviation=0.0)
    assert (exact.top1_agreement, exact.mean_kl, exact.recomputed_share) == (1.0, 0.0, 1.0)
    assert exact.deviation_kl_rank_correlation is None  # every estimate and every KL is 0
    reused = measure(model, rounds, 0.25, 4, max_deviation=0.0)
    assert reused.recomputed_share == 0.25 and reused.fallback_rate == 1.0
    assert (reused.top1_agreement_with_fallback, reused.mean_kl_with_fallback) == (1.0, 0.0)
