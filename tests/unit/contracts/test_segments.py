"""SegmentedPrompt, ReusePolicy and Sibling: the shape of a TokenDance prompt and its validation."""

from __future__ import annotations

import pytest

from agentserve.contracts.segments import (
    DEFAULT_RECOMPUTE_FRACTION,
    EXACT,
    PrivateSegment,
    ReuseMode,
    ReusePolicy,
    SegmentedPrompt,
    SharedBlock,
    SharedSpan,
    Sibling,
)

pytestmark = pytest.mark.unit


def test_a_prompt_flattens_its_segments_and_locates_its_shared_blocks() -> None:
    a, b = SharedBlock("out-a", 1, (5, 6, 7)), SharedBlock("out-b", 1, (8, 9))
    prompt = SegmentedPrompt((PrivateSegment((1, 2)), b, PrivateSegment((3,)), a))
    assert prompt.token_ids == [1, 2, 8, 9, 3, 5, 6, 7]
    assert prompt.shared_spans() == [SharedSpan(2, b), SharedSpan(5, a)]
    assert [span.end for span in prompt.shared_spans()] == [4, 8]
    assert prompt.reuse == ReusePolicy(ReuseMode.REUSE, DEFAULT_RECOMPUTE_FRACTION)


def test_lists_are_frozen_into_tuples() -> None:
    block = SharedBlock("x", 0, [1, 2])  # type: ignore[arg-type]
    assert block.token_ids == (1, 2)
    assert hash(SegmentedPrompt([block])) == hash(SegmentedPrompt((SharedBlock("x", 0, (1, 2)),)))  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("build", "message"),
    [
        (lambda: PrivateSegment(()), "private segment: token_ids must not be empty"),
        (lambda: PrivateSegment((1, -1)), "token_ids must be non-negative integers, got -1"),
        (lambda: SharedBlock("", 0, (1,)), "content_id must not be empty"),
        (lambda: SharedBlock("x", -1, (1,)), "shared block 'x': round_index must be >= 0, got -1"),
        (lambda: SharedBlock("x", 0, ()), "shared block 'x': token_ids must not be empty"),
        (lambda: SegmentedPrompt(()), "at least one segment"),
        (
            lambda: SegmentedPrompt((SharedBlock("x", 0, (1,)), SharedBlock("x", 0, (1,)))),
            "shared block 'x' appears twice in one prompt",
        ),
        (lambda: ReusePolicy(recompute_fraction=1.5), r"recompute_fraction must be in \[0, 1\], got 1.5"),
        (lambda: ReusePolicy(recompute_fraction=-0.1), r"recompute_fraction must be in \[0, 1\]"),
        (lambda: ReusePolicy(mode="exact"), "reuse mode must be one of"),  # type: ignore[arg-type]
        (lambda: Sibling("x", 3, 4, (0, 4)), r"recomputed_rows must lie in \[0, 4\)"),
        (lambda: Sibling("x", 3, 4, (2, 1)), "strictly increasing"),
        (lambda: Sibling("x", 3, 0), "num_tokens must be positive"),
    ],
)
def test_bad_input_is_rejected_naming_the_field(build, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        build()


def test_reuse_policy_bounds_and_exact() -> None:
    assert EXACT.exact and not ReusePolicy().exact
    assert ReusePolicy(recompute_fraction=0).recompute_fraction == 0
    assert ReusePolicy(recompute_fraction=1.0).recompute_fraction == 1.0


def test_sibling_reports_its_recomputed_share() -> None:
    sibling = Sibling("out-a", position_offset=12, num_tokens=8, recomputed_rows=[0, 3])  # type: ignore[arg-type]
    assert sibling.recomputed_rows == (0, 3)
    assert sibling.recomputed_fraction == 0.25
