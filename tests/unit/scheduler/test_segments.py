"""segment_prompt: a turn's shared blocks found among its new tokens, the rest private."""

from __future__ import annotations

import pytest

from agentserve.contracts.segments import PrivateSegment, ReuseMode, ReusePolicy, SharedBlock
from agentserve.contracts.turn_segments import SharedRef, TurnSegments
from agentserve.scheduler.segments import segment_prompt

pytestmark = pytest.mark.unit


def _no_text(text: str) -> list[int]:
    raise AssertionError("token blocks are never tokenized")


def test_blocks_given_out_of_order_become_shared_segments_in_prompt_order() -> None:
    history = [1, 2, 3]
    new = [9, 10, 11, 20, 21, 8, 30, 31, 32, 7]
    turn = TurnSegments(4, (SharedRef("b", (30, 31, 32)), SharedRef("a", (10, 11, 20))), ReusePolicy(ReuseMode.EXACT))
    prompt = segment_prompt(history + new, len(history), turn, _no_text)
    assert prompt.segments == (
        PrivateSegment((1, 2, 3, 9)),
        SharedBlock("a", 4, (10, 11, 20)),
        PrivateSegment((21, 8)),
        SharedBlock("b", 4, (30, 31, 32)),
        PrivateSegment((7,)),
    )
    assert prompt.token_ids == history + new and prompt.reuse.exact
    assert [(s.start, s.end) for s in prompt.shared_spans()] == [(4, 7), (9, 12)]


def test_a_block_is_searched_among_the_new_tokens_only_and_may_end_the_prompt() -> None:
    # The same tokens in the history are not the turn's block.
    prompt = segment_prompt([5, 6, 1, 5, 6], 2, TurnSegments(0, (SharedRef("x", (5, 6)),)), _no_text)
    assert prompt.segments == (PrivateSegment((5, 6, 1)), SharedBlock("x", 0, (5, 6)))


def test_a_text_block_is_tokenized_on_its_own() -> None:
    vocab = {"alpha\n": [40, 41], "beta\n": [50]}
    turn = TurnSegments(1, (SharedRef("t", text="alpha\n"),))
    prompt = segment_prompt([1, 40, 41, 50], 0, turn, lambda text: vocab[text])
    assert prompt.segments == (PrivateSegment((1,)), SharedBlock("t", 1, (40, 41)), PrivateSegment((50,)))


def test_token_ids_past_one_byte_are_matched_on_the_token_grid() -> None:
    # 256 = bytes 00 01 00 00: a naive byte search would find [1, 0] at an odd offset.
    prompt = segment_prompt([256, 1], 0, TurnSegments(0, (SharedRef("x", (1,)),)), _no_text)
    assert prompt.segments == (PrivateSegment((256,)), SharedBlock("x", 0, (1,)))


@pytest.mark.parametrize(
    ("shared", "message"),
    [
        ((SharedRef("gone", (99,)),), "shared block 'gone': its tokens do not occur in the turn's new tokens"),
        (
            (SharedRef("t", text="zzz"),),
            "shared block 't': its tokens do not occur in the turn's new tokens (a text block must start and end "
            "at a line boundary)",
        ),
        ((SharedRef("a", (2, 3)), SharedRef("b", (3, 4))), "shared blocks 'a' and 'b' overlap in the turn's tokens"),
        ((SharedRef("e", text="empty"),), "shared block 'e': its text has no tokens"),
    ],
)
def test_blocks_not_found_or_overlapping_are_refused_by_content_id(shared, message) -> None:
    vocab = {"zzz": [77], "empty": []}
    with pytest.raises(ValueError) as info:
        segment_prompt([1, 2, 3, 4], 0, TurnSegments(0, shared), lambda text: vocab[text])
    assert str(info.value) == message
