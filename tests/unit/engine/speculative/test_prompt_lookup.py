"""Prompt lookup proposes what followed the most recent earlier occurrence of the last n tokens."""

from __future__ import annotations

import pytest

from agentserve.engine.speculative.drafters import lookup

pytestmark = pytest.mark.unit


def test_the_most_recent_earlier_match_is_continued():
    tokens = [1, 2, 3, 9, 1, 2, 4, 5, 6, 1, 2]
    assert lookup(tokens, 2, 3) == [4, 5, 6]
    assert lookup(tokens, 2, 1) == [4]


def test_a_match_near_the_end_proposes_what_is_left():
    assert lookup([7, 8, 7, 8], 2, 5) == [7, 8]
    assert lookup([5, 6, 5], 1, 4) == [6, 5]


def test_no_match_no_room_or_no_budget_proposes_nothing():
    assert lookup([1, 2, 3, 4], 2, 4) == []
    assert lookup([1, 2], 2, 4) == []
    assert lookup([1, 2, 1, 2], 2, 0) == []
