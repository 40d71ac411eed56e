"""OpenAI's response_format and tool_choice mapped to StructuredOutput, without HTTP: every bad field
is a ValueError (the gateway's 400) naming it."""

from __future__ import annotations

import json

import pytest

from agentserve.contracts import StructuredKind, StructuredOutput, ToolSchema
from agentserve.contracts.structured import NO_PARAMETERS
from agentserve.scheduler.http.schemas import parse_chat_request
from agentserve.scheduler.http.structured import parse_structured
from agentserve.scheduler.http.tools import parse_tools

pytestmark = pytest.mark.unit

WEATHER = {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}
TOOLS = [
    {"type": "function", "function": {"name": "get_weather", "description": "d", "parameters": WEATHER}},
    {"type": "function", "function": {"name": "now"}},
]


def _parse(body):
    """As the chat route does: `tools` checked first, then the constraint built on them."""
    return parse_structured(body, parse_tools(body).tools)


def _json_schema(schema, name="answer", **extra):
    return {"response_format": {"type": "json_schema", "json_schema": {"name": name, "schema": schema, **extra}}}


def test_response_formats():
    assert _parse({}) is None
    assert _parse({"response_format": {"type": "text"}}) is None
    assert _parse({"response_format": {"type": "json_object"}}) == StructuredOutput(StructuredKind.JSON_OBJECT)
    assert _parse(_json_schema(WEATHER, strict=True)) == StructuredOutput.json_schema(WEATHER)


def test_tool_choices():
    assert _parse({"tools": TOOLS}) is None
    assert _parse({"tools": TOOLS, "tool_choice": "auto"}) is None
    assert _parse({"tools": TOOLS, "tool_choice": "none"}) is None
    named = _parse({"tools": TOOLS, "tool_choice": {"type": "function", "function": {"name": "get_weather"}}})
    assert named == StructuredOutput(
        StructuredKind.TOOL_CALL, tools=(ToolSchema("get_weather", json.dumps(WEATHER)),), single_call=True
    )
    required = _parse({"tools": TOOLS, "tool_choice": "required"})
    assert required == StructuredOutput(
        StructuredKind.TOOL_CALL,
        tools=(ToolSchema("get_weather", json.dumps(WEATHER)), ToolSchema("now", NO_PARAMETERS)),
    )


def test_chat_request_carries_the_constraint_in_its_sampling():
    body = {"messages": [{"role": "user", "content": "hi"}], "tools": TOOLS, "tool_choice": "required"}
    assert parse_chat_request(body).sampling.structured == _parse(body)
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
            {**_json_schema(WEATHER), "tools": TOOLS, "tool_choice": "required"},
            "'response_format' cannot be combined with tool_choice 'required' or a named function",
        ),
    ],
)
def test_bad_fields_are_value_errors_naming_them(body, message):
    with pytest.raises(ValueError, match=message):
        _parse(body)
