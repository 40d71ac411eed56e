"""The Hermes tool-call parser, whole and streamed, and the chat template that teaches the format."""

from __future__ import annotations

import json

import pytest

from agentserve.model_files.tokenizer import Tokenizer
from agentserve.model_files.tokenizer_files import ensure_default_tokenizer
from agentserve.scheduler.tool_calls import ParsedReply, ToolCall, ToolCallStream, parse_tool_calls

pytestmark = pytest.mark.unit

WEATHER = '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris", "days": 2}}\n</tool_call>'
CLOCK = '<tool_call>\n{"name": "now", "arguments": {}}\n</tool_call>'


def _calls(text: str) -> list[tuple[str, dict]]:
    return [(c.name, json.loads(c.arguments)) for c in parse_tool_calls(text).tool_calls]


def test_calls_are_parsed_and_content_is_none_when_only_calls():
    parsed = parse_tool_calls(WEATHER + "\n" + CLOCK)
    assert parsed.content is None
    assert _calls(WEATHER + "\n" + CLOCK) == [("get_weather", {"city": "Paris", "days": 2}), ("now", {})]
    assert parsed.tool_calls[0].arguments == '{"city": "Paris", "days": 2}'
    assert all(c.id.startswith("call_") and len(c.id) == 29 for c in parsed.tool_calls)
    assert parsed.tool_calls[0].id != parsed.tool_calls[1].id


def test_text_around_calls_is_content_without_the_separating_whitespace():
    parsed = parse_tool_calls("Let me check.\n" + WEATHER + "\n\nDone.")
    assert parsed.content == "Let me check.Done."
    assert parse_tool_calls("no tools here  \n").content == "no tools here  \n"
    assert parse_tool_calls("").content == ""


@pytest.mark.parametrize(
    "body",
    [
        "not json",
        '{"name": "f", "arguments": [1]}',
        '{"arguments": {}}',
        '{"name": "", "arguments": {}}',
        '["f"]',
    ],
)
def test_a_block_that_is_not_a_call_stays_content(body):
    text = f"<tool_call>{body}</tool_call>"
    assert parse_tool_calls(text) == parse_tool_calls(text).__class__(text, ())


def test_an_unterminated_block_stays_content():
    text = 'Sure <tool_call>\n{"name": "f", "argu'
    assert parse_tool_calls(text).content == text and parse_tool_calls(text).tool_calls == ()


def test_a_grammar_forced_block_cut_by_max_tokens_is_dropped_not_content():
    assert parse_tool_calls('<tool_call>\n{"name": "f", "argu', drop_open_block=True) == ParsedReply("", ())
    done = '<tool_call>\n{"name": "f", "arguments": {}}\n</tool_call>'
    cut = parse_tool_calls(f'Sure {done}\n<tool_call>\n{{"name": "g"', drop_open_block=True)
    assert cut.content == "Sure" and [c.name for c in cut.tool_calls] == ["f"]
    stream = ToolCallStream()
    assert stream.feed("Sure <tool_call>\n{") == ["Sure"]
    assert stream.finish(drop_open_block=True) == []


def test_missing_arguments_mean_an_empty_object():
    assert _calls('<tool_call>{"name": "ping"}</tool_call>') == [("ping", {})]


@pytest.mark.parametrize(
    "text", ["Let me check.\n" + WEATHER + "\n" + CLOCK + "\nok", "<tool_c is not a tag <tool", "a <b> c"]
)
def test_streaming_any_split_gives_the_whole_parse(text):
    whole = parse_tool_calls(text)
    for size in (1, 2, 3, 7, len(text)):
        stream = ToolCallStream()
        pieces: list[str | ToolCall] = []
        for i in range(0, len(text), size):
            pieces += stream.feed(text[i : i + size])
        pieces += stream.finish()
        content = "".join(p for p in pieces if isinstance(p, str))
        calls = [(p.name, p.arguments) for p in pieces if isinstance(p, ToolCall)]
        assert content == (whole.content or "")
        assert calls == [(c.name, c.arguments) for c in whole.tool_calls]
        assert stream.calls == len(calls)


def test_streaming_holds_back_only_what_may_open_a_block():
    stream = ToolCallStream()
    assert stream.feed("Hello <tool") == ["Hello"]  # the space waits: a block would drop it
    assert stream.feed("box> x") == [" <toolbox> x"]
    assert stream.feed(" <tool_call>") == []
    assert stream.feed('{"name": "f"}</tool_call>')[0].name == "f"
    assert stream.finish() == []


TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "get_weather",
            "description": "Current weather",
            "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
        },
    }
]


@pytest.fixture(scope="module")
def tokenizer() -> Tokenizer:
    return Tokenizer.from_dir(ensure_default_tokenizer())


def test_template_lists_tools_and_renders_calls_and_results_hermes_style(tokenizer):
    messages = [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": "Weather in Paris?"},
        {
            "role": "assistant",
            "content": "",
            "tool_calls": [
                {"id": "c1", "type": "function", "function": {"name": "get_weather", "arguments": {"city": "Paris"}}}
            ],
        },
        {"role": "tool", "content": "18C", "tool_call_id": "c1"},
        {"role": "tool", "content": "sunny", "tool_call_id": "c2"},
    ]
    assert tokenizer.apply_chat_template(messages, tools=TOOLS) == (
        "<|im_start|>system\nBe brief.\n\n# Tools\n\nYou may call one or more functions to assist with the user "
        "query.\n\nYou are provided with function signatures within <tools></tools> XML tags:\n<tools>\n"
        + json.dumps(TOOLS[0])
        + "\n</tools>\n\nFor each function call, return a json object with function name and arguments within "
        '<tool_call></tool_call> XML tags:\n<tool_call>\n{"name": <function-name>, "arguments": <args-json-object>}\n'
        "</tool_call><|im_end|>\n"
        "<|im_start|>user\nWeather in Paris?<|im_end|>\n"
        '<|im_start|>assistant\n<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call>'
        "<|im_end|>\n"
        "<|im_start|>user\n<tool_response>\n18C\n</tool_response>\n<tool_response>\nsunny\n</tool_response>"
        "<|im_end|>\n<|im_start|>assistant\n"
    )


def test_a_rendered_call_parses_back_to_itself(tokenizer):
    call = {"name": "get_weather", "arguments": {"city": "Zürich", "days": [1, 2]}}
    messages = [
        {"role": "user", "content": "q"},
        {"role": "assistant", "content": "", "tool_calls": [{"function": call}]},
    ]
    rendered = tokenizer.apply_chat_template(messages, add_generation_prompt=False)
    reply = rendered.split("<|im_start|>assistant\n", 1)[1].removesuffix("<|im_end|>\n")
    assert _calls(reply) == [(call["name"], call["arguments"])]


def test_without_tools_the_template_is_plain_chatml(tokenizer):
    messages = [
        {"role": "system", "content": "s"},
        {"role": "user", "content": "u"},
        {"role": "assistant", "content": "a"},
    ]
    assert tokenizer.apply_chat_template(messages, add_generation_prompt=False) == (
        "<|im_start|>system\ns<|im_end|>\n<|im_start|>user\nu<|im_end|>\n<|im_start|>assistant\na<|im_end|>\n"
    )
