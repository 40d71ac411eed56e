"""Request parsing and validation, without HTTP: every bad field is a ValueError naming it."""

from __future__ import annotations

import pytest

from agentserve.contracts import MAX_TOKENS_LIMIT, SamplingParams
from agentserve.scheduler.http.schemas import (
    DEFAULT_MAX_TOKENS,
    Message,
    parse_chat_request,
    parse_completion_request,
    parse_json_object,
    parse_sampling,
    parse_session_id,
)

pytestmark = pytest.mark.unit

USER = [{"role": "user", "content": "hi"}]


def test_chat_request_parses_messages_sampling_and_stream_options():
    req = parse_chat_request(
        {
            "model": "m",
            "messages": [{"role": "system", "content": "be brief"}, *USER],
            "max_completion_tokens": 7,
            "temperature": 0,
            "top_p": 0.5,
            "seed": 3,
            "stream": True,
            "stream_options": {"include_usage": True},
            "ignore_eos": True,
            "min_tokens": 7,
            "stop": ["\n\n", "END"],
            "logprobs": True,
            "top_logprobs": 2,
            "n": 3,
        }
    )
    assert req.messages == (Message("system", "be brief"), Message("user", "hi"))
    assert req.sampling == SamplingParams(
        max_tokens=7,
        temperature=0.0,
        top_p=0.5,
        seed=3,
        ignore_eos=True,
        min_tokens=7,
        logprobs=2,
        stop=("\n\n", "END"),
    )
    assert (req.stream, req.include_usage, req.model, req.n) == (True, True, "m", 3)


def test_fields_the_server_does_not_honour_are_rejected_by_name():
    for field in ("unknown_vendor_field", "frequency_penalty", "logit_bias"):
        with pytest.raises(ValueError, match=f"unsupported field '{field}'"):
            parse_chat_request({"messages": USER, field: 1})
    with pytest.raises(ValueError, match="unsupported field 'suffix'"):
        parse_completion_request({"prompt": "a", "suffix": "b"}, vocab_size=100)


def test_chat_logprobs_is_a_flag_and_top_logprobs_a_count():
    assert parse_chat_request({"messages": USER, "logprobs": True}).sampling.logprobs == 0
    assert parse_chat_request({"messages": USER, "logprobs": False}).sampling.logprobs is None
    assert parse_completion_request({"prompt": "a", "logprobs": 3}, vocab_size=100).sampling.logprobs == 3
    assert parse_chat_request({"messages": USER, "stop": "x"}).sampling.stop == ("x",)


def test_defaults_are_openai_like_with_bounded_max_tokens():
    req = parse_chat_request({"messages": USER})
    assert req.sampling == SamplingParams(max_tokens=DEFAULT_MAX_TOKENS, temperature=1.0, top_p=1.0)
    assert (req.stream, req.include_usage, req.model) == (False, False, None)


def test_max_completion_tokens_wins_over_max_tokens():
    assert parse_sampling({"max_tokens": 5, "max_completion_tokens": 9}).max_tokens == 9
    assert parse_sampling({"max_tokens": 5}).max_tokens == 5


def test_content_parts_and_tool_call_fields_are_kept():
    req = parse_chat_request(
        {
            "messages": [
                {"role": "user", "content": [{"type": "text", "text": "a"}, {"type": "text", "text": "b"}]},
                {
                    "role": "assistant",
                    "content": None,
                    "tool_calls": [
                        {"id": "c1", "type": "function", "function": {"name": "f", "arguments": '{"a": 1}'}}
                    ],
                },
                {"role": "tool", "content": "42", "tool_call_id": "c1"},
            ]
        }
    )
    assert [m.content for m in req.messages] == ["ab", "", "42"]
    # The template prints arguments as an object: OpenAI's JSON string is decoded.
    call = {"id": "c1", "type": "function", "function": {"name": "f", "arguments": {"a": 1}}}
    assert req.messages[1].template_dict() == {"role": "assistant", "content": "", "tool_calls": [call]}
    assert req.messages[2].template_dict()["tool_call_id"] == "c1"


@pytest.mark.parametrize(
    "body, field",
    [
        ({}, "messages"),
        ({"messages": []}, "messages"),
        ({"messages": "hi"}, "messages"),
        ({"messages": ["hi"]}, "messages[0]"),
        ({"messages": [{"role": "wizard", "content": "x"}]}, "role"),
        ({"messages": [{"role": "user"}]}, "content"),
        ({"messages": [{"role": "user", "content": 5}]}, "content"),
        ({"messages": [{"role": "user", "content": [{"type": "image_url"}]}]}, "content"),
        ({"messages": USER, "max_tokens": 0}, "max_tokens"),
        ({"messages": USER, "max_tokens": 10**9}, "max_tokens"),
        ({"messages": USER, "max_tokens": "5"}, "max_tokens"),
        ({"messages": USER, "max_tokens": 5.0}, "max_tokens"),
        ({"messages": USER, "max_tokens": True}, "max_tokens"),
        ({"messages": USER, "max_completion_tokens": -1}, "max_completion_tokens"),
        ({"messages": USER, "temperature": "hot"}, "temperature"),
        ({"messages": USER, "temperature": 2.5}, "temperature"),
        ({"messages": USER, "top_p": 0}, "top_p"),
        ({"messages": USER, "top_p": 1.5}, "top_p"),
        ({"messages": USER, "seed": -1}, "seed"),
        ({"messages": USER, "seed": 1.5}, "seed"),
        ({"messages": USER, "stream": "yes"}, "stream"),
        ({"messages": USER, "stream_options": []}, "stream_options"),
        ({"messages": USER, "stream_options": {"include_usage": 1}}, "include_usage"),
        ({"messages": USER, "n": 0}, "'n'"),
        ({"messages": USER, "n": 17}, "'n'"),
        ({"messages": USER, "stop": ["a", "b", "c", "d", "e"]}, "stop"),
        ({"messages": USER, "stop": [1]}, "stop"),
        ({"messages": USER, "min_tokens": 9, "max_tokens": 8}, "min_tokens"),
        ({"messages": USER, "min_tokens": -1}, "min_tokens"),
        ({"messages": USER, "logprobs": 2}, "logprobs"),
        ({"messages": USER, "top_logprobs": 2}, "top_logprobs"),
        ({"messages": USER, "logprobs": True, "top_logprobs": 21}, "top_logprobs"),
        ({"messages": USER, "tool_choice": "auto"}, "tool_choice"),
        ({"messages": USER, "tools": {}}, "tools"),
        ({"messages": USER, "tools": [{"type": "function", "function": {"name": "a b"}}]}, r"tools[0].function.name"),
        ({"messages": USER, "tools": [{"type": "function", "function": {"name": "f", "strict": 1}}]}, "strict"),
        (
            {
                "messages": USER,
                "tools": [{"type": "function", "function": {"name": "f", "strict": True, "parameters": {}}}],
            },
            "tools[0].function.parameters: the root must be an object schema",
        ),
        ({"messages": USER, "tools": [{"type": "code_interpreter"}]}, "tools[0]"),
        (
            {"messages": USER, "tools": [{"type": "function", "function": {"name": "f"}}], "tool_choice": "always"},
            "tool_choice",
        ),
        (
            {
                "messages": [
                    *USER,
                    {
                        "role": "assistant",
                        "tool_calls": [{"type": "function", "function": {"name": "f", "arguments": "[]"}}],
                    },
                    {"role": "tool", "content": "1"},
                ]
            },
            "messages[1].tool_calls[0].function.arguments",
        ),
        ({"messages": USER, "ignore_eos": "no"}, "ignore_eos"),
        ({"messages": USER, "model": 3}, "model"),
    ],
)
def test_bad_chat_requests_name_the_field(body, field):
    with pytest.raises(ValueError, match=field.replace("[", r"\[").replace("]", r"\]")):
        parse_chat_request(body)


def test_max_tokens_limit_is_the_engine_limit():
    assert parse_sampling({"max_tokens": MAX_TOKENS_LIMIT}).max_tokens == MAX_TOKENS_LIMIT
    with pytest.raises(ValueError):
        parse_sampling({"max_tokens": MAX_TOKENS_LIMIT + 1})


@pytest.mark.parametrize(
    "prompt, expected",
    [
        ("once upon", "once upon"),
        ([5, 6, 7], (5, 6, 7)),
        (["once"], "once"),
        ([[5, 6]], (5, 6)),
    ],
)
def test_completion_prompt_forms(prompt, expected):
    assert parse_completion_request({"prompt": prompt}, vocab_size=100).prompt == expected


@pytest.mark.parametrize("prompt", [None, "", [], [100], [-1], [1.0], [True], ["a", "b"], [[1], [2]], {"a": 1}])
def test_bad_completion_prompts(prompt):
    with pytest.raises(ValueError, match="prompt"):
        parse_completion_request({"prompt": prompt}, vocab_size=100)


@pytest.mark.parametrize(
    "raw, message",
    [
        (b"{not json", "not valid JSON"),
        (b"\xff\xfe", "not valid JSON"),
        (b"[1, 2]", "JSON object"),
        (b"", "not valid JSON"),
    ],
)
def test_body_must_be_a_json_object(raw, message):
    with pytest.raises(ValueError, match=message):
        parse_json_object(raw)


def test_session_id_header():
    assert parse_session_id(None) is None
    assert parse_session_id("  ") is None
    assert parse_session_id(" conv-1:a.b_c ") == "conv-1:a.b_c"
    for bad in ("a b", "x" * 129, "semi;colon", "é"):
        with pytest.raises(ValueError, match="X-Session-Id"):
            parse_session_id(bad)
