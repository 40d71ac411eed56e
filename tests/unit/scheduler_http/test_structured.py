"""OpenAI's response_format and tool_choice mapped to StructuredOutput, without HTTP: every bad field
is a ValueError (the gateway's 400) naming it."""

from __future__ import annotations

import dataclasses
import json

import pytest

from agentserve.contracts import StructuredKind, StructuredOutput, ToolSchema
from agentserve.contracts.structured import NO_PARAMETERS
from agentserve.scheduler.http.schemas import parse_chat_request
from agentserve.scheduler.http.structured import parse_structured
from agentserve.scheduler.http.tools import parse_tools

pytestmark = pytest.mark.unit

WEATHER = {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}
MAX_TOKENS = 64
# WEATHER as decoded at MAX_TOKENS: closed, its one string at most 64 // 4 characters.
WEATHER_DECODED = {
    **WEATHER,
    "properties": {"city": {"type": "string", "maxLength": 16}},
    "additionalProperties": False,
}
STRICT_WEATHER = {**WEATHER, "additionalProperties": False}
TOOLS = [
    {"type": "function", "function": {"name": "get_weather", "description": "d", "parameters": WEATHER}},
    {"type": "function", "function": {"name": "now"}},
]


def _parse(body):
    """As the chat route does: `tools` checked first, then the constraint built on them."""
    return parse_structured(body, parse_tools(body).tools, MAX_TOKENS)


def _json_schema(schema, name="answer", **extra):
    return {"response_format": {"type": "json_schema", "json_schema": {"name": name, "schema": schema, **extra}}}


def test_response_formats():
    assert _parse({}) is None
    assert _parse({"response_format": {"type": "text"}}) is None
    assert _parse({"response_format": {"type": "json_object"}}) == StructuredOutput(StructuredKind.JSON_OBJECT)
    assert _parse(_json_schema(WEATHER)) == StructuredOutput.json_schema(WEATHER_DECODED)
    assert _parse(_json_schema(STRICT_WEATHER, strict=True)) == StructuredOutput.json_schema(WEATHER_DECODED)


def test_tool_choices():
    assert _parse({"tools": TOOLS}) is None
    assert _parse({"tools": TOOLS, "tool_choice": "auto"}) is None
    assert _parse({"tools": TOOLS, "tool_choice": "none"}) is None
    named = _parse({"tools": TOOLS, "tool_choice": {"type": "function", "function": {"name": "get_weather"}}})
    assert named == StructuredOutput(
        StructuredKind.TOOL_CALL, tools=(ToolSchema("get_weather", json.dumps(WEATHER_DECODED)),), single_call=True
    )
    required = _parse({"tools": TOOLS, "tool_choice": "required"})
    assert required == StructuredOutput(
        StructuredKind.TOOL_CALL,
        tools=(ToolSchema("get_weather", json.dumps(WEATHER_DECODED)), ToolSchema("now", NO_PARAMETERS)),
    )


def test_parallel_tool_calls_false_allows_one_call_wherever_a_grammar_decodes_the_calls():
    strict_tools = [
        {"type": "function", "function": {"name": "get_weather", "parameters": STRICT_WEATHER, "strict": True}}
    ]
    weather = ToolSchema("get_weather", json.dumps(WEATHER_DECODED))
    required = _parse({"tools": TOOLS, "tool_choice": "required", "parallel_tool_calls": False})
    assert required == StructuredOutput(
        StructuredKind.TOOL_CALL, tools=(weather, ToolSchema("now", NO_PARAMETERS)), single_call=True
    )
    auto = _parse({"tools": strict_tools, "parallel_tool_calls": False})
    assert auto == StructuredOutput(StructuredKind.TEXT_OR_TOOL_CALLS, tools=(weather,), single_call=True)
    answer = _parse({"tools": strict_tools, "parallel_tool_calls": False, **_json_schema(WEATHER)})
    assert answer == StructuredOutput(
        StructuredKind.JSON_SCHEMA, schema=json.dumps(WEATHER_DECODED), tools=(weather,), single_call=True
    )
    assert _parse({"tools": TOOLS, "parallel_tool_calls": False}) is None  # no grammar: nothing to bound
    assert _parse({"tools": TOOLS, "tool_choice": "required", "parallel_tool_calls": True}) == _parse(
        {"tools": TOOLS, "tool_choice": "required"}
    )
    with pytest.raises(ValueError, match="'parallel_tool_calls' must be a boolean, got 'no'"):
        _parse({"tools": TOOLS, "tool_choice": "required", "parallel_tool_calls": "no"})
    body = {"messages": [{"role": "user", "content": "hi"}], "tools": TOOLS, "parallel_tool_calls": False}
    assert parse_chat_request(body).tools.choice == "auto"  # accepted by the chat route, not a 400


def test_auto_with_a_strict_tool_is_free_text_whose_calls_are_valid_calls():
    strict_tools = [
        {"type": "function", "function": {"name": "get_weather", "parameters": STRICT_WEATHER, "strict": True}}
    ]
    expected = StructuredOutput(
        StructuredKind.TEXT_OR_TOOL_CALLS, tools=(ToolSchema("get_weather", json.dumps(WEATHER_DECODED)),)
    )
    assert _parse({"tools": strict_tools}) == expected
    assert _parse({"tools": strict_tools, "tool_choice": "auto"}) == expected
    assert _parse({"tools": strict_tools, "tool_choice": "none"}) is None
    # Beside a json_schema the reply is that JSON or, instead, valid calls (OpenAI's reading of the pair).
    assert _parse({"tools": strict_tools, **_json_schema(WEATHER)}) == dataclasses.replace(
        StructuredOutput.json_schema(WEATHER_DECODED), tools=expected.tools
    )
    assert _parse({"tools": TOOLS, **_json_schema(WEATHER)}) == StructuredOutput.json_schema(WEATHER_DECODED)


def test_a_forced_call_wins_over_response_format():
    """The reply is the call (OpenAI accepts the pair; the Agents SDK sends it for an agent with an
    output_type whose tool_choice forces a tool), so the call grammar alone applies, as in vLLM."""
    named = {"type": "function", "function": {"name": "get_weather"}}
    assert _parse({**_json_schema(WEATHER), "tools": TOOLS, "tool_choice": named}) == _parse(
        {"tools": TOOLS, "tool_choice": named}
    )
    assert _parse({**_json_schema(WEATHER), "tools": TOOLS, "tool_choice": "required"}) == _parse(
        {"tools": TOOLS, "tool_choice": "required"}
    )


@pytest.mark.parametrize(
    ("schema", "message"),
    [
        (WEATHER, r"^response_format.json_schema.schema: additionalProperties must be false$"),
        (
            {**STRICT_WEATHER, "properties": {"city": {"type": "string"}, "days": {"type": "integer"}}},
            r"^response_format.json_schema.schema: every property must be in 'required'; missing \['days'\]$",
        ),
        (
            {**STRICT_WEATHER, "properties": {"city": {"type": "string", "minLength": 1, "uniqueItems": True}}},
            r"^response_format.json_schema.schema.properties.city: 'uniqueItems' is not supported in strict mode$",
        ),
        (
            {**STRICT_WEATHER, "properties": {"city": {"type": "string", "minItems": 1}}},
            r"^response_format.json_schema.schema.properties.city: 'minItems' does not apply to \['string'\]$",
        ),
    ],
)
def test_strict_json_schema_breaking_openais_rules_is_a_value_error_naming_the_path(schema, message):
    with pytest.raises(ValueError, match=message):
        _parse(_json_schema(schema, strict=True))


def test_chat_request_carries_the_constraint_in_its_sampling():
    body = {"messages": [{"role": "user", "content": "hi"}], "tools": TOOLS, "tool_choice": "required"}
    assert parse_chat_request({**body, "max_tokens": MAX_TOKENS}).sampling.structured == _parse(body)
    assert parse_chat_request({"messages": [{"role": "user", "content": "hi"}]}).sampling.structured is None
    with pytest.raises(ValueError, match="ignore_eos cannot be combined with structured output"):
        parse_chat_request({**body, "ignore_eos": True})


NAMED_GHOST = {"type": "function", "function": {"name": "ghost"}}


@pytest.mark.parametrize(
    ("body", "message"),
    [
        ({"response_format": "json"}, "'response_format.type' must be one of 'text', 'json_object', 'json_schema'"),
        ({"response_format": {"type": "xml"}}, "'response_format.type' must be one of"),
        ({"response_format": {"type": "json_schema"}}, "'response_format.json_schema' must be an object"),
        (_json_schema(WEATHER, name="my answer"), "'response_format.json_schema.name' must be 1-64 letters"),
        (_json_schema(WEATHER, strict="yes"), "'response_format.json_schema.strict' must be a boolean"),
        (_json_schema(None), "'response_format.json_schema.schema' must be a JSON Schema object, got NoneType"),
        (
            _json_schema({"type": "integer", "minimum": 3, "maximum": 1}),
            "'response_format.json_schema.schema' is not a usable JSON Schema: Unsatisfiable schema: minimum",
        ),
        (
            _json_schema({"type": "foo"}),
            r"'response_format.json_schema.schema' is not a usable JSON Schema: Invalid type",
        ),
        ({"tool_choice": "always", "tools": TOOLS}, "'tool_choice' must be 'auto', 'none', 'required' or"),
        ({"tool_choice": {"type": "function", "function": {}}, "tools": TOOLS}, "'tool_choice.function.name' must be"),
        ({"tool_choice": "required"}, "'tool_choice' needs 'tools'"),
        (
            {"tool_choice": NAMED_GHOST, "tools": TOOLS},
            r"names function 'ghost', which is not in 'tools' \(\['get_weather', 'now'\]\)",
        ),
        (
            {
                "tool_choice": "required",
                "tools": [{"type": "function", "function": {"name": "f", "parameters": {"not": {}}}}],
            },
            r"'tools\[0\].function.parameters' is not a usable JSON Schema: Unimplemented keys: \[\"not\"\]",
        ),
        (
            {**_json_schema(None), "tools": TOOLS, "tool_choice": "required"},
            "'response_format.json_schema.schema' must be a JSON Schema object, got NoneType",
        ),
    ],
)
def test_bad_fields_are_value_errors_naming_them(body, message):
    with pytest.raises(ValueError, match=message):
        _parse(body)
