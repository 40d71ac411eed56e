"""StructuredOutput: the shape a request's output must take (any JSON object, a JSON Schema, or tool calls).

The HTTP gateway maps OpenAI's `response_format` and a named or "required" `tool_choice` to it;
`agentserve.structured.grammar` turns it into the grammar the engines decode under
(`agentserve.engine.grammar` masks every sampled token with it). Schemas travel as JSON text, so the
value is hashable: an engine compiles one grammar per distinct StructuredOutput.

Tool calls use the hermes format that chat templates render and the gateway parses back:

    <tool_call>
    {"name": "get_weather", "arguments": {"city": "Paris"}}
    </tool_call>

several calls separated by one newline.
"""

from __future__ import annotations

import enum
import json
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

TOOL_CALL_OPEN = "<tool_call>\n"
TOOL_CALL_CLOSE = "\n</tool_call>"
TOOL_CALL_SEPARATOR = "\n"
# A function declared without parameters takes none (OpenAI): its arguments are `{}`.
NO_PARAMETERS = '{"type": "object", "properties": {}, "additionalProperties": false}'
# OpenAI's rule for function names.
TOOL_NAME_PATTERN = re.compile(r"[A-Za-z0-9_-]{1,64}")


class StructuredKind(enum.Enum):
    JSON_OBJECT = "json_object"  # any JSON object
    JSON_SCHEMA = "json_schema"  # a JSON value matching `schema`
    TOOL_CALL = "tool_call"  # hermes tool calls to `tools`, arguments matching each one's parameters
    TEXT_OR_TOOL_CALLS = "text_or_tool_calls"  # free text in which any tool call is a TOOL_CALL's


@dataclass(frozen=True)
class ToolSchema:
    """A function the output may call: its name and its arguments' JSON Schema (JSON text)."""

    name: str
    parameters: str = NO_PARAMETERS

    def __post_init__(self) -> None:
        if not isinstance(self.name, str) or not TOOL_NAME_PATTERN.fullmatch(self.name):
            raise ValueError(f"tool name must be 1-64 letters, digits, '_' or '-', got {self.name!r}")
        parse_schema(self.parameters, f"tool {self.name!r} parameters")


@dataclass(frozen=True)
class StructuredOutput:
    kind: StructuredKind
    schema: str = ""  # JSON_SCHEMA: the JSON Schema, as JSON text
    # TOOL_CALL, TEXT_OR_TOOL_CALLS: the functions a call may name. JSON_OBJECT, JSON_SCHEMA: optional;
    # with tools the output is the JSON or, instead, one or more calls among them (OpenAI's
    # `response_format` beside tools under tool_choice "auto": it shapes the answer, not the calls).
    tools: tuple[ToolSchema, ...] = ()
    # At most one call (a named tool_choice, or parallel_tool_calls false): TOOL_CALL exactly one;
    # TEXT_OR_TOOL_CALLS and JSON with tools, at most one. False: one or more.
    single_call: bool = False

    def __post_init__(self) -> None:
        if not isinstance(self.kind, StructuredKind):
            raise ValueError(f"structured output kind must be a StructuredKind, got {self.kind!r}")
        if self.kind is StructuredKind.JSON_SCHEMA:
            parse_schema(self.schema, "structured output schema")
        elif self.schema:
            raise ValueError(f"a {self.kind.value} structured output takes no schema")
        if self.single_call and not self.tools:
            raise ValueError("single_call applies to a structured output with tools only")
        if not self.tools:
            if self.kind in (StructuredKind.TOOL_CALL, StructuredKind.TEXT_OR_TOOL_CALLS):
                raise ValueError(f"a {self.kind.value} structured output needs at least one tool")
            return
        names = [tool.name for tool in self.tools]
        if len(set(names)) != len(names):
            raise ValueError(f"tool names must be unique, got {names}")

    @classmethod
    def json_schema(cls, schema: Mapping[str, Any]) -> StructuredOutput:
        return cls(StructuredKind.JSON_SCHEMA, schema=json.dumps(schema))

    @classmethod
    def tool_calls(cls, tools: Mapping[str, Mapping[str, Any]], single_call: bool = False) -> StructuredOutput:
        """Calls among `tools` (name -> parameters schema); `single_call`: exactly one."""
        return cls(
            StructuredKind.TOOL_CALL,
            tools=tuple(ToolSchema(name, json.dumps(params)) for name, params in tools.items()),
            single_call=single_call,
        )


def parse_schema(text: str, what: str) -> dict[str, Any]:
    """The JSON Schema object in `text`; ValueError naming `what` if it is not one."""
    if not isinstance(text, str):
        raise ValueError(f"{what} must be JSON text, got {type(text).__name__}")
    try:
        schema = json.loads(text)
    except json.JSONDecodeError as exc:
        raise ValueError(f"{what} is not valid JSON: {exc}") from None
    if not isinstance(schema, dict):
        raise ValueError(f"{what} must be a JSON object, got {type(schema).__name__}")
    return schema
