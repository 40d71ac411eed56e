"""The turn span as an LLM tracing UI reads it: OpenInference attributes, exact values."""

from __future__ import annotations

import json

import pytest

from agentserve.common.errors import RetryableError
from agentserve.common.openinference import MAX_TEXT_CHARS, bounded
from agentserve.contracts import SamplingParams
from agentserve.scheduler.sessions import Session
from agentserve.scheduler.tracing import TurnSpans
from tests.unit.scheduler.fakes import BLOCK_SIZE, EOS, collect, run

pytestmark = pytest.mark.unit

GREEDY = SamplingParams(max_tokens=16, seed=7)


def turn_spans(spans) -> list:
    return [s for s in spans.get_finished_spans() if s.name == "turn"]


def test_a_turn_span_is_an_llm_call_with_model_tokens_and_text(make_core, store, tokenizer, spans) -> None:
    store.hits = 2
    core = make_core(model_name="tiny-chat")

    async def go():
        sid = await core.open_session(tenant="acme")
        return sid, await collect(core.turn(sid, message="hello there", sampling=GREEDY))

    sid, events = run(go())
    meta = events[0].metadata
    (span,) = turn_spans(spans)
    attributes = dict(span.attributes)
    parameters = json.loads(attributes.pop("llm.invocation_parameters"))
    assert (parameters["max_tokens"], parameters["temperature"], parameters["seed"]) == (16, 0.0, 7)
    reply = tokenizer.decode([300, 301, 302, EOS])
    assert {k: v for k, v in attributes.items() if not k.startswith("turn.")} == {
        "openinference.span.kind": "LLM",
        "session.id": sid,
        "llm.model_name": "tiny-chat",
        "llm.provider": "agentserve",
        "llm.token_count.prompt": meta.prompt_tokens,
        "llm.token_count.prompt_details.cache_read": 2 * BLOCK_SIZE,
        "llm.token_count.completion": 4,
        "llm.token_count.total": meta.prompt_tokens + 4,
        "input.value": "hello there",
        "input.mime_type": "text/plain",
        "llm.input_messages.0.message.role": "user",
        "llm.input_messages.0.message.content": "hello there",
        "output.value": reply,
        "output.mime_type": "text/plain",
        "llm.output_messages.0.message.role": "assistant",
        "llm.output_messages.0.message.content": reply,
    }
    assert meta.cached_tokens == 2 * BLOCK_SIZE
    # The client learns the span's id, so what it does next (a tool call) can join the turn.
    assert meta.span_id == format(span.context.span_id, "016x")
    assert meta.trace_id == format(span.context.trace_id, "032x")


def test_a_token_id_turn_records_their_text_as_input(make_core, tokenizer, spans) -> None:
    core = make_core()
    prompt = tokenizer.encode("ls -la")

    async def go():
        sid = await core.open_session()
        await collect(core.turn(sid, token_ids=prompt, role="tool", sampling=GREEDY))

    run(go())
    (span,) = turn_spans(spans)
    assert span.attributes["input.value"] == "ls -la"
    assert span.attributes["llm.input_messages.0.message.role"] == "tool"
    assert span.attributes["llm.model_name"] == "agentserve-tiny"  # the scheduler's default model name


def test_a_failed_turn_records_the_tokens_it_streamed(make_core, engines, tokenizer, spans) -> None:
    core = make_core(decode=1, turn_retries=0)
    engines.die_after["127.0.0.1:7000"] = 1  # streams 301, then dies

    async def go():
        sid = await core.open_session()
        with pytest.raises(RetryableError):
            await collect(core.turn(sid, token_ids=[10, 11], sampling=GREEDY))

    run(go())
    (span,) = turn_spans(spans)
    assert not span.status.is_ok
    assert (span.attributes["llm.token_count.completion"], span.attributes["llm.token_count.total"]) == (2, 4)
    assert span.attributes["output.value"] == tokenizer.decode([300, 301])


def test_long_text_is_cut_and_says_by_how_much(tokenizer, spans) -> None:
    turn_spans_ = TurnSpans(tokenizer, "tiny")
    message = "x" * (MAX_TEXT_CHARS + 5)
    span = turn_spans_.start(Session("s1"), 3, GREEDY, "user", message, None)
    turn_spans_.end(span, 3, tokenizer.encode("y" * (MAX_TEXT_CHARS + 2)))
    turn_spans_.end(span, 3, [])  # ended once: a second end changes nothing
    (span,) = turn_spans(spans)
    assert span.attributes["input.value"] == "x" * MAX_TEXT_CHARS + "… [5 more characters not recorded]"
    assert span.attributes["output.value"] == "y" * MAX_TEXT_CHARS + "… [2 more characters not recorded]"
    assert span.attributes["llm.token_count.total"] == 3 + len(tokenizer.encode("y" * (MAX_TEXT_CHARS + 2)))


def test_bounded_keeps_short_text_whole() -> None:
    assert bounded("abc", limit=3) == "abc"
    assert bounded("abcd", limit=3) == "abc… [1 more characters not recorded]"
