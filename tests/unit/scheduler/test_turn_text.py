"""Stop strings, min_tokens and logprobs through a turn: the text cut before the stop string, the
decode engine's budget, and the engines' logprobs passed through token for token."""

from __future__ import annotations

import pytest

from agentserve.contracts import SamplingParams
from agentserve.scheduler.turn_text import StopStrings
from tests.unit.scheduler.fakes import EOS, collect, fake_logprob, run

pytestmark = pytest.mark.unit


def test_stop_strings_hold_back_a_possible_start_and_cut_at_the_earliest():
    stops = StopStrings(["END", "\n\n"])
    assert stops.add("Hello E") == "Hello "  # "E" may start "END"
    assert stops.add("xit\n") == "Exit"
    assert stops.add("\nmore") == ""
    assert stops.stopped and stops.add("after") == ""

    earliest = StopStrings(["b", "a"])
    assert earliest.add("xxabc") == "xx" and earliest.stopped


def test_stop_strings_wait_for_min_tokens_and_flush_at_the_end():
    stops = StopStrings(["END"])
    assert stops.add("END", active=False) == "END" and not stops.stopped
    assert stops.add(" EN") == " "
    assert stops.add("", final=True) == "EN"
    assert StopStrings([]).add("anything E") == "anything E"


def test_a_stop_string_ends_the_turn_and_commits_what_was_generated(make_core, engines, tokenizer) -> None:
    words = tokenizer.encode("Paris is nice. END of story")
    engines.reply = [*words, EOS]
    core = make_core()

    async def go():
        sid = await core.open_session()
        events = await collect(core.turn(sid, message="q", sampling=SamplingParams(max_tokens=30, stop=("END",))))
        return sid, events

    sid, events = run(go())
    text = "".join(e.text for e in events)
    assert text == "Paris is nice. " and events[-1].finish_reason == "stop"
    generated = [t for e in events for t in e.token_ids]
    # Generation ended at the token that completed the stop string; the decode stream was closed.
    assert tokenizer.decode(generated).startswith("Paris is nice. END")
    assert not tokenizer.decode(generated[:-1]).startswith("Paris is nice. END")
    assert events[-1].completion_tokens == len(generated) < len(words)
    assert engines.cancelled == ["127.0.0.1:7000"]
    assert core.sessions.get(sid).history[-len(generated) :] == generated


def test_min_tokens_reaches_both_engines_as_what_is_left(make_core, engines) -> None:
    core = make_core()

    async def go():
        sid = await core.open_session()
        return await collect(core.turn(sid, message="q", sampling=SamplingParams(max_tokens=10, min_tokens=3)))

    run(go())
    assert engines.prefills[0][1].sampling.min_tokens == 3
    decode = engines.generates[0][1].sampling
    assert (decode.max_tokens, decode.min_tokens) == (9, 2)


def test_logprobs_come_through_one_per_token(make_core, engines) -> None:
    core = make_core()
    sampling = SamplingParams(max_tokens=10, logprobs=2)

    async def go():
        sid = await core.open_session()
        return await collect(core.turn(sid, message="q", sampling=sampling))

    events = run(go())
    assert [e.logprobs for e in events] == [[fake_logprob(t, sampling) for t in e.token_ids] for e in events]
    assert [t for e in events for t in e.token_ids] == [300, 301, 302, EOS]
