"""The grammar a StructuredOutput decodes under (llguidance's Lark dialect), and its validation.

Torch-free, so the scheduler rejects a request with exactly the grammar the engines would compile.
JSON comes out in one canonical layout: no free whitespace (a weak model could otherwise pad an
object with blanks until max_tokens), ", " and ": " separators, properties in schema order. A tool
call therefore reads exactly `<tool_call>\\n{"name": "f", "arguments": {...}}\\n</tool_call>`.

JSON with tools (a `response_format` beside strict tools under tool_choice "auto") is the JSON or,
from its first character on, calls instead: `start: json | calls`.

Free text with tool calls (TEXT_OR_TOOL_CALLS, a strict tool under tool_choice "auto") is
llguidance's structural-tag pattern: text is free up to the first `<tool_call>` (a lazy lexeme ends
at its trigger), and from there on the call is decoded under the call grammar; the text after the
last call never contains `<tool_call>`, so every block the reply opens is a call with valid arguments.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

import llguidance

from agentserve.contracts.structured import (
    TOOL_CALL_CLOSE,
    TOOL_CALL_OPEN,
    TOOL_CALL_SEPARATOR,
    StructuredKind,
    StructuredOutput,
    ToolSchema,
    parse_schema,
)

if TYPE_CHECKING:
    from llguidance._lib import JsonCompileOptions  # a TypedDict of the type stubs only

# llguidance's JSON options. They override a schema's own "x-guidance": the layout is part of the
# output format clients parse, not a per-request choice.
JSON_LAYOUT: JsonCompileOptions = {"whitespace_flexible": False, "item_separator": ", ", "key_separator": ": "}
ANY_OBJECT: dict[str, Any] = {"type": "object"}


def grammar_for(structured: StructuredOutput) -> str:
    """The Lark grammar (with embedded JSON Schemas) the output must match; `check` says if it compiles."""
    calls = " | ".join(f"fn{i}" for i in range(len(structured.tools)))
    functions = [f"fn{i}: {call_rule(tool)}" for i, tool in enumerate(structured.tools)]
    if structured.kind in (StructuredKind.JSON_OBJECT, StructuredKind.JSON_SCHEMA):
        schema = (
            ANY_OBJECT if structured.kind is StructuredKind.JSON_OBJECT else parse_schema(structured.schema, "schema")
        )
        if not structured.tools:
            return f"start: {_json(schema)}\n"
        rules = [
            f"start: {_json(schema)} | calls",
            "calls: call" if structured.single_call else f"calls: {_several_calls()}",
            f"call: {_literal(TOOL_CALL_OPEN)} ({calls}) {_literal(TOOL_CALL_CLOSE)}",
            *functions,
        ]
        return "\n".join(rules) + "\n"
    if structured.kind is StructuredKind.TEXT_OR_TOOL_CALLS:
        trigger = TOOL_CALL_OPEN.rstrip("\n")
        rules = [
            "start: call? TEXT" if structured.single_call else "start: call* TEXT",
            f"call: opening {_literal(TOOL_CALL_OPEN[len(trigger) :])} ({calls}) {_literal(TOOL_CALL_CLOSE)}",
            f"opening[lazy]: TEXT {_literal(trigger)}",
            f"TEXT: /(.|\\n)*/ & ~/(.|\\n)*{trigger}(.|\\n)*/",
            *functions,
        ]
        return "\n".join(rules) + "\n"
    rules = [
        "start: call" if structured.single_call else f"start: {_several_calls()}",
        f"call: {_literal(TOOL_CALL_OPEN)} ({calls}) {_literal(TOOL_CALL_CLOSE)}",
        *functions,
    ]
    return "\n".join(rules) + "\n"


def _several_calls() -> str:
    """One or more calls, separated by a newline, which may also follow the last one: the grammar
    may end right after it, so a model that would go on with text there ends its reply
    (`engine.grammar`: EOS takes the refused tokens' probability) instead of being held to the call
    that the newline alone would otherwise have to open."""
    separator = _literal(TOOL_CALL_SEPARATOR)
    return f"call ({separator} call)* {separator}?"


def call_rule(tool: ToolSchema) -> str:
    """One call's object: the tool's name as literal text, then arguments matching its parameters.
    The parameters stay a schema of their own, so their `$ref`s resolve against their own root."""
    head = '{"name": ' + json.dumps(tool.name) + ', "arguments": '
    return f"{_literal(head)} {_json(parse_schema(tool.parameters, 'parameters'))} {_literal('}')}"


def schema_error(schema: dict[str, Any]) -> str:
    """Why llguidance cannot decode under the JSON Schema `schema` ('' when it can): an unsatisfiable
    or malformed schema, or a keyword it does not implement (e.g. `not`, `uniqueItems`)."""
    grammar = llguidance.LLMatcher.grammar_from_json_schema(schema, overrides=JSON_LAYOUT)
    return llguidance.LLMatcher.validate_grammar(grammar)


def check(structured: StructuredOutput) -> None:
    """ValueError naming the schema the engines could not compile; returns when they can."""
    for what, schema in _schemas(structured):
        error = schema_error(schema)
        if error:
            raise ValueError(f"{what} is not a usable JSON Schema: {error}")
    error = llguidance.LLMatcher.validate_grammar(grammar_for(structured))
    if error:
        raise ValueError(f"the structured output grammar does not compile: {error}")


def _schemas(structured: StructuredOutput) -> Iterator[tuple[str, dict[str, Any]]]:
    if structured.kind is StructuredKind.JSON_SCHEMA:
        yield "the response schema", parse_schema(structured.schema, "schema")
    for tool in structured.tools:
        yield f"tool {tool.name!r} parameters", parse_schema(tool.parameters, "parameters")


def _json(schema: dict[str, Any]) -> str:
    return "%json " + json.dumps({**schema, "x-guidance": JSON_LAYOUT})


def _literal(text: str) -> str:
    # A JSON string is a valid Lark string literal with the same escapes.
    return json.dumps(text)
