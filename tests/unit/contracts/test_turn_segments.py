"""TurnSegments: what a turn says of its shared blocks, validated naming the field."""

from __future__ import annotations

import pytest

from agentserve.contracts.segments import ReuseMode, ReusePolicy
from agentserve.contracts.turn_segments import MAX_SHARED_BLOCKS, SharedRef, TurnSegments

pytestmark = pytest.mark.unit


def test_valid_turn_segments_keep_their_blocks_in_order() -> None:
    segments = TurnSegments(3, [SharedRef("a", (1, 2)), SharedRef("b", text="x\n")], ReusePolicy(ReuseMode.EXACT))
    assert segments.shared == (SharedRef("a", (1, 2)), SharedRef("b", text="x\n"))
    assert segments.round_index == 3 and segments.reuse.exact


@pytest.mark.parametrize(
    ("round_index", "shared", "message"),
    [
        (-1, (SharedRef("a", (1,)),), "round must be a non-negative integer, got -1"),
        (True, (SharedRef("a", (1,)),), "round must be a non-negative integer, got True"),
        (0, (), "shared must name at least one shared block"),
        (0, (SharedRef("", (1,)),), "shared[0].content_id must be 1-128 printable characters, got ''"),
        (0, (SharedRef("x" * 129, (1,)),), "shared[0].content_id must be 1-128 printable characters"),
        (0, (SharedRef("a\n", (1,)),), "shared[0].content_id must be 1-128 printable characters"),
        (0, (SharedRef("a", (1,)), SharedRef("a", (2,))), "shared[1].content_id 'a' appears twice in one turn"),
        (0, (SharedRef("a"),), "shared[0] ('a') needs exactly one of token_ids and text"),
        (0, (SharedRef("a", (1,), "t"),), "shared[0] ('a') needs exactly one of token_ids and text"),
        (0, (SharedRef("a", (-1,)),), "shared[0].token_ids must be token ids"),
        (0, (SharedRef("a", (2**32,)),), "shared[0].token_ids must be token ids"),
        (0, tuple(SharedRef(f"b{i}", (1,)) for i in range(MAX_SHARED_BLOCKS + 1)), "shared holds at most 256"),
    ],
)
def test_bad_turn_segments_name_the_field(round_index, shared, message) -> None:
    with pytest.raises(ValueError) as info:
        TurnSegments(round_index, shared)
    assert str(info.value).startswith(message)
