"""SSE framing and the OpenAI objects built from turn events."""

from __future__ import annotations

import pytest

from agentserve.scheduler.http.responses import Reply, ReplyFormat, openai_finish_reason, usage
from agentserve.scheduler.http.sse import DONE, decode_events, encode_event
from tests.unit.scheduler_http.fakes import FakeEvent, FakeMetadata

pytestmark = pytest.mark.unit


def test_event_framing_is_one_data_line_and_a_blank_line():
    assert encode_event({"a": "é\n"}) == 'data: {"a":"é\\n"}\n\n'.encode()
    assert DONE == b"data: [DONE]\n\n"
    assert decode_events(encode_event({"a": 1}) + encode_event({"b": [2]}) + DONE) == [{"a": 1}, {"b": [2]}, "[DONE]"]


@pytest.mark.parametrize(
    "core, openai",
    [
        ("eos", "stop"),
        ("stop", "stop"),
        ("length", "length"),
        ("max_tokens", "length"),
        ("abort", "abort"),
        (None, None),
        ("", None),
    ],
)
def test_finish_reasons(core, openai):
    assert openai_finish_reason(core) == openai


def _reply() -> Reply:
    reply = Reply()
    reply.add(FakeEvent(FakeMetadata("t", 0, prompt_tokens=100, cached_tokens=96, trace_id="ab"), [], ""))
    reply.add(FakeEvent(None, [7], "he"))
    reply.add(FakeEvent(None, [8], "y"))
    reply.add(FakeEvent(None, [], "", True, "eos", 2))
    return reply


def test_reply_adds_up_events():
    reply = _reply()
    assert (reply.text, reply.token_ids, reply.finish_reason, reply.trace_id) == ("hey", [7, 8], "stop", "ab")
    assert usage([reply]) == {
        "prompt_tokens": 100,
        "completion_tokens": 2,
        "total_tokens": 102,
        "prompt_tokens_details": {"cached_tokens": 96},
    }


def test_chat_and_text_shapes():
    chat = ReplyFormat("chat", "m", include_usage=True, id="chatcmpl-1", created=5)
    assert chat.role_chunk()["choices"][0]["delta"] == {"role": "assistant", "content": ""}
    assert chat.delta_chunk("x") == {
        "id": "chatcmpl-1",
        "object": "chat.completion.chunk",
        "created": 5,
        "model": "m",
        "usage": None,
        "choices": [{"index": 0, "delta": {"content": "x"}, "logprobs": None, "finish_reason": None}],
    }
    assert chat.full([_reply()])["choices"][0]["message"] == {"role": "assistant", "content": "hey"}
    text = ReplyFormat.new("text", "m")
    assert text.id.startswith("cmpl-") and text.role_chunk() is None
    assert text.delta_chunk("x")["choices"][0]["text"] == "x" and "usage" not in text.delta_chunk("x")
    assert text.full([_reply()])["object"] == "text_completion"
    assert text.usage_chunk([_reply()])["choices"] == []


def test_a_forced_call_cut_by_the_length_limit_is_no_content_and_finishes_for_length():
    forced = ReplyFormat.new("chat", "m", parse_tools=True, grammar_calls=True)
    free = ReplyFormat.new("chat", "m", parse_tools=True)
    cut = Reply()
    cut.add(FakeEvent(None, [7, 8], '<tool_call>\n{"name": "f", "arguments": {"q": "abc'))
    cut.add(FakeEvent(None, [], "", True, "length", 2))
    choice = forced.full([cut])["choices"][0]
    assert (choice["message"], choice["finish_reason"]) == ({"role": "assistant", "content": ""}, "length")
    assert free.full([cut])["choices"][0]["message"]["content"] == cut.text  # unconstrained: kept as text
    streamed = Reply()
    chunks = []
    for event in (FakeEvent(None, [7], "<tool_call>\n{"), FakeEvent(None, [8], '"na', True, "length", 2)):
        streamed.add(event)
        chunks += forced.stream_chunks(streamed, event)
    assert [c["choices"][0]["delta"] for c in chunks] == [{}]
    assert chunks[-1]["choices"][0]["finish_reason"] == "length"
