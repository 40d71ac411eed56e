"""StructuredOutput and its place in SamplingParams: malformed values fail at construction."""

from __future__ import annotations

import pytest

from agentserve.contracts import SamplingParams, StructuredKind, StructuredOutput, ToolSchema
from agentserve.contracts.structured import NO_PARAMETERS

pytestmark = pytest.mark.unit


def test_builders_carry_schemas_as_json_text_and_compare_by_value():
    schema = StructuredOutput.json_schema({"type": "integer"})
    assert schema == StructuredOutput(StructuredKind.JSON_SCHEMA, schema='{"type": "integer"}')
    assert hash(schema) == hash(StructuredOutput.json_schema({"type": "integer"}))  # an engine's cache key
    calls = StructuredOutput.tool_calls({"f": {"type": "object"}}, single_call=True)
    assert calls.tools == (ToolSchema("f", '{"type": "object"}'),) and calls.single_call
    assert ToolSchema("g").parameters == NO_PARAMETERS


@pytest.mark.parametrize(
    ("make", "message"),
    [
        (lambda: StructuredOutput(StructuredKind.JSON_SCHEMA, schema="{"), "schema is not valid JSON"),
        (lambda: StructuredOutput(StructuredKind.JSON_SCHEMA, schema="[1]"), "schema must be a JSON object, got list"),
        (
            lambda: StructuredOutput(StructuredKind.JSON_OBJECT, schema="{}"),
            "json_object structured output takes no schema",
        ),
        (
            lambda: StructuredOutput(StructuredKind.JSON_OBJECT, single_call=True),
            "single_call applies to a structured output with tools only",
        ),
        (lambda: StructuredOutput(StructuredKind.TOOL_CALL), "needs at least one tool"),
        (lambda: StructuredOutput(StructuredKind.TEXT_OR_TOOL_CALLS), "text_or_tool_calls structured output needs"),
        (lambda: StructuredOutput(StructuredKind.TOOL_CALL, tools=(ToolSchema("f"), ToolSchema("f"))), "unique"),
        (lambda: ToolSchema("get weather"), "tool name must be 1-64 letters"),
        (lambda: ToolSchema("f", "3"), "tool 'f' parameters must be a JSON object, got int"),
        (lambda: StructuredOutput("json_object"), "must be a StructuredKind"),  # type: ignore[arg-type]
    ],
)
def test_malformed_structured_output_is_a_value_error(make, message):
    with pytest.raises(ValueError, match=message):
        make()


def test_neither_ignore_eos_nor_min_tokens_can_overrule_the_grammars_end():
    structured = StructuredOutput(StructuredKind.JSON_OBJECT)
    with pytest.raises(ValueError, match="ignore_eos cannot be combined with structured output"):
        SamplingParams(ignore_eos=True, structured=structured)
    with pytest.raises(ValueError, match="min_tokens cannot be combined with structured output"):
        SamplingParams(min_tokens=2, structured=structured)
