"""StopScanner: where a turn's output ends, by caller stop id, stop string or the engine's end."""

from __future__ import annotations

import pytest

from agentserve.contracts import SamplingParams
from agentserve.scheduler.stop_scanner import Scanned, StopScanner

pytestmark = pytest.mark.unit


def test_a_stop_id_ends_the_output_there_and_drops_what_follows(tokenizer) -> None:
    stops = StopScanner(tokenizer, SamplingParams(max_tokens=10, stop_token_ids=(7,)))
    assert stops.scan([5], finished=False) == Scanned([5], tokenizer.decode([5]))
    assert stops.scan([6, 7, 8], finished=False) == Scanned([6, 7], tokenizer.decode([6, 7]), "stop")


def test_a_stop_id_within_min_tokens_does_not_end_the_output(tokenizer) -> None:
    # min_tokens 2 counts the first token: a stop id as the second output token is kept, the third ends it.
    stops = StopScanner(tokenizer, SamplingParams(max_tokens=10, min_tokens=2, stop_token_ids=(7,)))
    assert stops.scan([7], finished=False).reason is None
    assert stops.scan([7, 7, 9], finished=False).tokens == [7, 7]
    assert StopScanner(tokenizer, SamplingParams(stop_token_ids=(7,), min_tokens=1)).scan([7], False).reason is None


def test_the_engines_end_gives_its_reason_or_length(tokenizer) -> None:
    assert StopScanner(tokenizer, SamplingParams()).scan([5, 6], finished=True, finish_reason="stop").reason == "stop"
    assert StopScanner(tokenizer, SamplingParams()).scan([5], finished=True, finish_reason=None).reason == "length"
    assert StopScanner(tokenizer, SamplingParams()).scan([5], finished=False).reason is None


def test_a_stop_string_ends_the_output_with_its_text_cut(tokenizer) -> None:
    words = tokenizer.encode("Paris is nice. END of story")
    stops = StopScanner(tokenizer, SamplingParams(max_tokens=64, stop=("END",)))
    scanned = [stops.scan([token], finished=False) for token in words]
    ended = [i for i, s in enumerate(scanned) if s.reason is not None]
    assert scanned[ended[0]].reason == "stop"
    assert "".join(s.text for s in scanned[: ended[0] + 1]) == "Paris is nice. "
