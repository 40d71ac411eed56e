"""The chat route's `agentserve_segments` extension: parsed to TurnSegments, 400 naming the field."""

from __future__ import annotations

import pytest

from agentserve.contracts.segments import EXACT, ReusePolicy
from agentserve.contracts.turn_segments import SharedRef, TurnSegments
from agentserve.scheduler.http.segments import parse_segments

pytestmark = pytest.mark.unit

USER = [{"role": "user", "content": "round 2\nagent1: go north\n"}]


def test_absent_field_is_a_plain_turn() -> None:
    assert parse_segments({"messages": USER}) is None


def test_text_and_token_blocks_with_the_reuse_knob() -> None:
    raw = {
        "round": 2,
        "shared": [{"content_id": "r2/a1", "text": "agent1: go north\n"}, {"content_id": "r2/a2", "token_ids": [5]}],
        "reuse": "reuse",
        "recompute_fraction": 0.3,
    }
    assert parse_segments({"agentserve_segments": raw}) == TurnSegments(
        2,
        (SharedRef("r2/a1", text="agent1: go north\n"), SharedRef("r2/a2", (5,))),
        ReusePolicy(recompute_fraction=0.3),
    )
    exact = {"shared": [{"content_id": "x", "token_ids": [1]}], "reuse": "exact"}
    assert parse_segments({"agentserve_segments": exact}) == TurnSegments(0, (SharedRef("x", (1,)),), EXACT)


@pytest.mark.parametrize(
    ("raw", "message"),
    [
        ([], "agentserve_segments must be an object"),
        ({"shared": [], "fraction": 1}, "agentserve_segments has unknown keys ['fraction']"),
        ({"round": 1}, "agentserve_segments.shared must be a list of objects with content_id"),
        ({"shared": []}, "agentserve_segments.shared must name at least one shared block"),
        ({"shared": ["x"]}, "agentserve_segments.shared[0] must be an object of ['content_id', 'text', 'token_ids']"),
        ({"shared": [{"content_id": 3, "text": "a"}]}, "agentserve_segments.shared[0].content_id must be a string"),
        ({"shared": [{"content_id": "a", "text": 3}]}, "agentserve_segments.shared[0].text must be a string"),
        ({"shared": [{"content_id": "a", "token_ids": 3}]}, "agentserve_segments.shared[0].token_ids must be a list"),
        (
            {"shared": [{"content_id": "a"}]},
            "agentserve_segments.shared[0] ('a') needs exactly one of token_ids and text",
        ),
        (
            {"round": -2, "shared": [{"content_id": "a", "text": "t"}]},
            "agentserve_segments.round must be a non-negative",
        ),
        (
            {"shared": [{"content_id": "a", "text": "t"}], "reuse": "blend"},
            "agentserve_segments.reuse must be one of ['exact', 'reuse'], got 'blend'",
        ),
        (
            {"shared": [{"content_id": "a", "text": "t"}], "reuse": "exact", "recompute_fraction": 0.2},
            "agentserve_segments.recompute_fraction applies to reuse 'reuse' only, not 'exact'",
        ),
        (
            {"shared": [{"content_id": "a", "text": "t"}], "recompute_fraction": "half"},
            "agentserve_segments.recompute_fraction must be a number, got 'half'",
        ),
        (
            {"shared": [{"content_id": "a", "text": "t"}], "recompute_fraction": 1.5},
            "agentserve_segments.reuse: recompute_fraction must be in [0, 1], got 1.5",
        ),
    ],
)
def test_bad_segments_name_the_field(raw, message) -> None:
    with pytest.raises(ValueError) as info:
        parse_segments({"agentserve_segments": raw})
    assert str(info.value).startswith(message)
