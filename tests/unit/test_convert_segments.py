"""convert.py's TokenDance messages: turn segments and the prefill's segmented prompt, both ways."""

from __future__ import annotations

import pytest

from agentserve.contracts import PrefillRequest, SamplingParams
from agentserve.contracts.segments import EXACT, PrivateSegment, ReusePolicy, SegmentedPrompt, SharedBlock
from agentserve.contracts.turn_segments import SharedRef, TurnSegments
from agentserve.convert import (
    prefill_request_from_proto,
    prefill_request_to_proto,
    reuse_policy_from_proto,
    turn_segments_from_proto,
    turn_segments_to_proto,
)
from agentserve.v1 import common_pb2, scheduler_pb2

pytestmark = pytest.mark.unit

PROMPT = SegmentedPrompt(
    (
        PrivateSegment((1, 2)),
        SharedBlock("r1/a", 1, (3, 4, 5)),
        SharedBlock("r1/b", 1, (6,)),
        PrivateSegment((7,)),
    ),
    ReusePolicy(recompute_fraction=0.15),
)


def test_prefill_request_segments_round_trip_as_spans_over_the_prompt() -> None:
    request = PrefillRequest("r", "s", "t", PROMPT.token_ids, SamplingParams(max_tokens=1), segments=PROMPT)
    wire = prefill_request_to_proto(request)
    assert [(s.content_id, s.round, s.start, s.length) for s in wire.segments.shared] == [
        ("r1/a", 1, 2, 3),
        ("r1/b", 1, 5, 1),
    ]
    assert prefill_request_from_proto(wire).segments == PROMPT  # 0.15 survives float32
    plain = prefill_request_to_proto(PrefillRequest("r", "s", "t", [1], SamplingParams(max_tokens=1)))
    assert not plain.HasField("segments") and prefill_request_from_proto(plain).segments is None


def test_exact_and_unset_policies() -> None:
    exact = SegmentedPrompt(PROMPT.segments, EXACT)
    wire = prefill_request_to_proto(PrefillRequest("r", "s", "t", exact.token_ids, SamplingParams(1), segments=exact))
    assert not wire.segments.reuse.HasField("recompute_fraction")
    assert prefill_request_from_proto(wire).segments == exact
    assert reuse_policy_from_proto(common_pb2.ReusePolicy()) == ReusePolicy()


@pytest.mark.parametrize(
    ("spans", "message"),
    [
        ([(0, 0)], "segments.shared[0] ('x'): span [0, 0) must be non-empty"),
        (
            [(2, 2), (3, 1)],
            "segments.shared[1] ('x'): span [3, 4) must be non-empty, after the previous span (ends at 4)",
        ),
        (
            [(6, 2)],
            "segments.shared[0] ('x'): span [6, 8) must be non-empty, after the previous span (ends at 0) and "
            "within the prompt (7 tokens)",
        ),
    ],
)
def test_bad_prefill_spans_are_refused(spans, message) -> None:
    wire = prefill_request_to_proto(PrefillRequest("r", "s", "t", list(range(7)), SamplingParams(max_tokens=1)))
    for start, length in spans:
        wire.segments.shared.add(content_id="x", start=start, length=length)
    with pytest.raises(ValueError) as info:
        prefill_request_from_proto(wire)
    assert str(info.value).startswith(message)


def test_turn_segments_round_trip_and_validate_naming_the_field() -> None:
    segments = TurnSegments(
        4, (SharedRef("a", (1, 2)), SharedRef("b", text="hi\n")), ReusePolicy(recompute_fraction=0.5)
    )
    request = scheduler_pb2.TurnRequest(session_id="s", segments=turn_segments_to_proto(segments))
    assert turn_segments_from_proto(request) == segments
    assert turn_segments_from_proto(scheduler_pb2.TurnRequest(session_id="s")) is None
    bad = scheduler_pb2.TurnRequest(segments=scheduler_pb2.TurnSegments(round=1))
    with pytest.raises(ValueError, match=r"^segments\.shared must name at least one shared block$"):
        turn_segments_from_proto(bad)
    exact_with_fraction = scheduler_pb2.TurnRequest(
        segments=scheduler_pb2.TurnSegments(
            shared=[scheduler_pb2.SharedBlockRef(content_id="a", token_ids=[1])],
            reuse=common_pb2.ReusePolicy(mode=common_pb2.ReusePolicy.MODE_EXACT, recompute_fraction=0.2),
        )
    )
    with pytest.raises(ValueError, match=r"^segments\.reuse: recompute_fraction applies to mode reuse only"):
        turn_segments_from_proto(exact_with_fraction)
    over = common_pb2.ReusePolicy(mode=common_pb2.ReusePolicy.MODE_REUSE, recompute_fraction=2)
    with pytest.raises(ValueError, match=r"^reuse: recompute_fraction must be in \[0, 1\], got 2.0$"):
        reuse_policy_from_proto(over)
    with pytest.raises(ValueError, match=r"^reuse\.mode: unknown reuse mode 7$"):
        reuse_policy_from_proto(common_pb2.ReusePolicy(mode=7))
