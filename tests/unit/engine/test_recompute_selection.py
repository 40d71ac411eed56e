"""RecomputeSelector: per block its anchors, then its most deviating tokens, up to the budget;
residual_deviation: what the budget leaves unrepaired."""

from __future__ import annotations

import math

import pytest
import torch

from agentserve.engine.recompute_selection import RecomputeSelector, residual_deviation

pytestmark = pytest.mark.unit


def test_budget_is_the_fraction_rounded_up() -> None:
    assert [RecomputeSelector(f).budget(8) for f in (0.0, 0.1, 0.25, 0.3, 1.0)] == [0, 1, 2, 3, 8]


def test_private_tokens_anchors_and_the_largest_deviations_are_chosen() -> None:
    # 2 private tokens, a block at [2, 10), 2 private tokens, a block at [12, 16).
    deviation = torch.tensor([0, 0, 9, 9, 1, 7, 2, 8, 3, 0, 0, 0, 5, 1, 4, 2], dtype=torch.float32)
    chosen = RecomputeSelector(0.5, anchor_tokens=2).choose(deviation, [(2, 10), (12, 16)])
    # Block 1 (budget 4): anchors 2, 3, then 7 (8) and 5 (7). Block 2 (budget 2): anchors 12, 13;
    # and the last token, 15.
    assert chosen.nonzero().flatten().tolist() == [0, 1, 2, 3, 5, 7, 10, 11, 12, 13, 15]


def test_the_last_token_is_always_computed_and_fraction_0_chooses_no_other_shared_token() -> None:
    chosen = RecomputeSelector(0.0).choose(torch.arange(6.0), [(1, 6)])
    assert chosen.tolist() == [True, False, False, False, False, True]


def test_a_budget_smaller_than_the_anchors_is_all_anchors() -> None:
    chosen = RecomputeSelector(0.1, anchor_tokens=2).choose(torch.arange(10.0), [(0, 10)])
    assert chosen.nonzero().flatten().tolist() == [0, 9]


def test_a_choice_by_position_needs_no_deviation() -> None:
    selector, spans = RecomputeSelector(0.3, anchor_tokens=2), [(2, 10), (12, 16)]
    assert not selector.by_position(spans)  # the 8-token block's budget is 2 anchors + 1
    assert selector.by_position([(12, 16)]) and RecomputeSelector(0.0).by_position(spans)
    positional = RecomputeSelector(0.1, anchor_tokens=2)
    assert positional.by_position(spans)
    assert torch.equal(positional.choose(None, spans, 17), positional.choose(torch.arange(17.0), spans))
    assert positional.choose(None, spans, 17).nonzero().flatten().tolist() == [0, 1, 2, 10, 11, 12, 16]
    with pytest.raises(ValueError, match="a deviation is needed: some block's budget goes past its anchors"):
        selector.choose(None, spans, 17)


def test_bad_settings_are_rejected() -> None:
    with pytest.raises(ValueError, match=r"recompute_fraction must be in \[0, 1\], got 1.2"):
        RecomputeSelector(1.2)
    with pytest.raises(ValueError, match="anchor_tokens must be >= 0"):
        RecomputeSelector(0.5, anchor_tokens=-1)


def test_residual_deviation_is_the_unrepaired_share_of_the_kv_energy() -> None:
    k, v = torch.ones(4, 1, 2), torch.ones(4, 1, 2)  # energy 4 per token
    shared = torch.tensor([False, True, True, True])
    deviation = torch.tensor([0.0, 3.0, 2.0, 1.0])
    chosen = torch.tensor([True, True, False, False])
    assert residual_deviation(deviation, k, v, shared, chosen) == pytest.approx(math.sqrt(3 / 12))
    assert residual_deviation(deviation, k, v, shared, torch.ones(4, dtype=torch.bool)) == 0.0
