"""The generated agent transcripts: deterministic, in the request shapes the gateway renders, and
never about the words the framework tests ask about."""

from __future__ import annotations

import json
import random

import pytest

from agentserve.model_files.tokenizer import Tokenizer
from agentserve.model_files.tokenizer_files import ensure_default_tokenizer
from agentserve.training.agent_transcripts import (
    DOMAINS,
    FINAL_TOOL,
    HELD_OUT_WORDS,
    WORDS,
    agent_transcripts,
    transcript,
)
from agentserve.training.corpus import transcript_tokens

pytestmark = pytest.mark.unit


def _calls(messages: list[dict]) -> list[dict]:
    return [call for m in messages if m.get("tool_calls") for call in m["tool_calls"]]


def test_the_same_seed_draws_the_same_transcripts_and_another_seed_others() -> None:
    assert agent_transcripts(50, seed=3) == agent_transcripts(50, seed=3)
    assert agent_transcripts(50, seed=3) != agent_transcripts(50, seed=4)


def test_no_transcript_mentions_a_held_out_word() -> None:
    assert not set(HELD_OUT_WORDS) & set(WORDS)
    for t in agent_transcripts(400):
        text = json.dumps(t.messages)
        assert not any(f"'{word}'" in text or f'"{word}"' in text for word in HELD_OUT_WORDS)


def test_the_first_call_is_the_questions_tool_with_arguments_of_its_schema_and_then_the_answer() -> None:
    tools_by_name = {d.name: d for d in DOMAINS}
    for t in agent_transcripts(300):
        if t.tools is None:  # the structured follow-up: the finished exchange answered again as JSON
            assert t.messages[-1]["role"] == "assistant" and json.loads(t.messages[-1]["content"])
            continue
        declared = {tool["function"]["name"] for tool in t.tools}
        calls = _calls(t.messages)
        if calls[-1]["name"].startswith("transfer_to_"):  # the triage agent's turn ends with its handoff
            assert calls == [{"name": calls[-1]["name"], "arguments": {}}] and declared == {calls[-1]["name"]}
            continue
        # A specialist's transcript opens with the triage agent's transfer, no longer among its tools.
        assert {c["name"] for c in calls if not c["name"].startswith("transfer_to_")} <= declared
        domain_calls = [c for c in calls if c["name"] in tools_by_name]
        assert len(domain_calls) == 1
        domain = tools_by_name[domain_calls[0]["name"]]
        assert set(domain_calls[0]["arguments"]) == set(domain.parameters)
        last = t.messages[-1]
        if FINAL_TOOL in declared:
            assert last["tool_calls"][0]["name"] == FINAL_TOOL
            assert set(last["tool_calls"][0]["arguments"]) == set(domain.answer_fields)
        else:
            assert set(json.loads(last["content"])) == set(domain.answer_fields)


def test_a_handoff_is_two_requests_the_second_calling_the_tool_after_the_transfer() -> None:
    rng = random.Random(0)
    pairs = [ts for ts in (transcript(rng) for _ in range(200)) if len(ts) == 2 and ts[1].tools is not None]
    assert pairs
    for triage, specialist in pairs:
        transfer = _calls(triage.messages)[0]["name"]
        assert [tool["function"]["name"] for tool in triage.tools] == [transfer]
        assert [c["name"] for c in _calls(specialist.messages)][0] == transfer
        assert transfer not in {tool["function"]["name"] for tool in specialist.tools}


def test_a_transcript_renders_its_tools_and_calls_in_the_hermes_markup() -> None:
    tokenizer = Tokenizer.from_dir(ensure_default_tokenizer())
    t = next(t for t in agent_transcripts(20) if t.tools and FINAL_TOOL in json.dumps(t.tools))
    text = tokenizer.decode(transcript_tokens(tokenizer, t), skip_special_tokens=False)
    assert "<tools>\n" + json.dumps(t.tools[0]) in text
    call = _calls(t.messages)[0]
    assert (
        f'<tool_call>\n{{"name": "{call["name"]}", "arguments": {json.dumps(call["arguments"])}}}\n</tool_call>' in text
    )
    assert text.count("<tool_response>\n") == 1
