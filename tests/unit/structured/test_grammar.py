"""The grammar text a StructuredOutput decodes under, and the validation the scheduler runs on it."""

from __future__ import annotations

import pytest

from agentserve.contracts import StructuredKind, StructuredOutput, ToolSchema
from agentserve.structured.grammar import check, grammar_for, schema_error

pytestmark = pytest.mark.unit

LAYOUT = '"x-guidance": {"whitespace_flexible": false, "item_separator": ", ", "key_separator": ": "}'


def test_json_kinds_embed_the_schema_with_the_canonical_layout():
    assert grammar_for(StructuredOutput(StructuredKind.JSON_OBJECT)) == f'start: %json {{"type": "object", {LAYOUT}}}\n'
    # The layout is ours even when the schema names another.
    schema = StructuredOutput.json_schema({"type": "integer", "x-guidance": {"whitespace_flexible": True}})
    assert grammar_for(schema) == f'start: %json {{"type": "integer", {LAYOUT}}}\n'


def test_json_beside_tools_is_the_json_or_calls_instead():
    structured = StructuredOutput(StructuredKind.JSON_OBJECT, tools=(ToolSchema("f"),))
    assert grammar_for(structured).splitlines()[:3] == [
        f'start: %json {{"type": "object", {LAYOUT}}} | calls',
        'calls: call ("\\n" call)* "\\n"?',
        'call: "<tool_call>\\n" (fn0) "\\n</tool_call>"',
    ]
    check(structured)


def test_named_tool_call_is_exactly_one_hermes_call():
    calls = StructuredOutput.tool_calls({"get_weather": {"type": "object"}}, single_call=True)
    assert grammar_for(calls) == (
        "start: call\n"
        'call: "<tool_call>\\n" (fn0) "\\n</tool_call>"\n'
        f'fn0: "{{\\"name\\": \\"get_weather\\", \\"arguments\\": " %json {{"type": "object", {LAYOUT}}} "}}"\n'
    )


def test_required_tool_choice_is_one_or_more_calls_among_the_tools():
    lark = grammar_for(StructuredOutput.tool_calls({"a": {"type": "object"}, "b": {"type": "object"}}))
    assert lark.splitlines()[:2] == [
        'start: call ("\\n" call)* "\\n"?',
        'call: "<tool_call>\\n" (fn0 | fn1) "\\n</tool_call>"',
    ]
    assert lark.splitlines()[3].startswith('fn1: "{\\"name\\": \\"b\\", \\"arguments\\": " %json ')


def test_text_or_tool_calls_is_free_text_whose_blocks_are_calls():
    structured = StructuredOutput(StructuredKind.TEXT_OR_TOOL_CALLS, tools=(ToolSchema("f"),))
    assert grammar_for(structured).splitlines()[:4] == [
        "start: call* TEXT",
        'call: opening "\\n" (fn0) "\\n</tool_call>"',
        'opening[lazy]: TEXT "<tool_call>"',
        "TEXT: /(.|\\n)*/ & ~/(.|\\n)*<tool_call>(.|\\n)*/",
    ]
    check(structured)


def test_schema_errors_say_what_llguidance_cannot_do():
    assert schema_error({"type": "object", "properties": {"a": {"type": "integer"}}}) == ""
    assert schema_error({"type": "integer", "minimum": 5, "maximum": 2}) == (
        "Unsatisfiable schema: minimum (5) is greater than maximum (2)"
    )
    assert schema_error({"not": {"type": "integer"}}) == 'Unimplemented keys: ["not"]'


def test_check_names_the_schema_at_fault():
    check(StructuredOutput.tool_calls({"f": {"type": "object"}}))
    with pytest.raises(ValueError, match=r"^the response schema is not a usable JSON Schema: Invalid type: foo$"):
        check(StructuredOutput.json_schema({"type": "foo"}))
    with pytest.raises(ValueError, match=r"^tool 'g' parameters is not a usable JSON Schema: .*uniqueItems"):
        check(StructuredOutput.tool_calls({"f": {}, "g": {"type": "array", "uniqueItems": True}}))
