"""OpenAI's `response_format` and `tool_choice` as the StructuredOutput the engines decode under.

- `response_format` `{"type": "json_object"}`: any JSON object; `{"type": "json_schema",
  "json_schema": {"name", "schema", "strict"}}`: JSON matching `schema`; `{"type": "text"}`: free.
- `tool_choice` `"required"`: one or more hermes tool calls among `tools`; `{"type": "function",
  "function": {"name": X}}`: exactly one call, to X; `"auto"` (the default with tools) with a
  `strict` tool: free text in which every call is a valid call among `tools`; `"auto"` without a
  strict tool, and `"none"`: nothing.
- `parallel_tool_calls: false`: at most one call (exactly one where a call is forced).
- both: a forced call (`"required"`, a named function) wins, as the reply is calls; under `"auto"`
  with a strict tool the reply is the `response_format`'s JSON or, instead, calls among `tools`.

`strict: true` (on a json_schema or a tool) first checks the schema against OpenAI's strict rules
(`agentserve.structured.strict_schema`). Every schema is then decoded as
`agentserve.structured.decoding_schema` rewrites it for the request's max_tokens (objects closed,
strings and numbers finite), and compiled here with the engines' grammar library, so a schema they
could not decode under is a 400 naming its field, before any engine sees the request.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Mapping, Sequence
from typing import Any

from agentserve.contracts.structured import (
    NO_PARAMETERS,
    TOOL_NAME_PATTERN,
    StructuredKind,
    StructuredOutput,
    ToolSchema,
)
from agentserve.structured import grammar
from agentserve.structured.decoding_schema import decoding_schema
from agentserve.structured.strict_schema import check_strict


def parse_structured(
    body: Mapping[str, Any], tools: Sequence[Mapping[str, Any]], max_tokens: int
) -> StructuredOutput | None:
    """The request's output constraint, or None for free text; ValueError naming the bad field.
    `tools`: the request's `tools`, already checked (`scheduler.http.tools.parse_tools`);
    `max_tokens`: the reply's limit, which bounds the schemas' strings (`decoding_schema`)."""
    response = _response_format(body.get("response_format"), max_tokens)
    calls = _tool_choice(body.get("tool_choice"), tools, max_tokens, _parallel_tool_calls(body))
    if calls is not None and calls.kind is StructuredKind.TOOL_CALL:
        # A forced call: the reply is tool calls, so `response_format` (checked above) shapes no part
        # of it. OpenAI accepts the pair (the Agents SDK sends it for an agent with an output_type
        # whose tool_choice forces a tool) and vLLM decodes the call grammar alone.
        return calls
    if response is not None and calls is not None:
        # "auto" with strict tools: the JSON answer, or calls instead (OpenAI's reading; the Agents
        # SDK sends its output_type's schema on every step, those that should call a tool included).
        return dataclasses.replace(response, tools=calls.tools, single_call=calls.single_call)
    return response or calls


def _response_format(raw: Any, max_tokens: int) -> StructuredOutput | None:
    if raw is None:
        return None
    kind = raw.get("type") if isinstance(raw, dict) else None
    if kind == "text":
        return None
    if kind == "json_object":
        return StructuredOutput(StructuredKind.JSON_OBJECT)
    if kind != "json_schema":
        raise ValueError("'response_format.type' must be one of 'text', 'json_object', 'json_schema'")
    spec = raw.get("json_schema")
    if not isinstance(spec, dict):
        raise ValueError("'response_format.json_schema' must be an object with 'name' and 'schema'")
    name = spec.get("name")
    if not isinstance(name, str) or not TOOL_NAME_PATTERN.fullmatch(name):
        raise ValueError(f"'response_format.json_schema.name' must be 1-64 letters, digits, '_' or '-', got {name!r}")
    strict = spec.get("strict")
    if strict is not None and not isinstance(strict, bool):
        raise ValueError(f"'response_format.json_schema.strict' must be a boolean, got {strict!r}")
    where = "response_format.json_schema.schema"
    if strict:
        check_strict(spec.get("schema"), where)
    schema = _usable_schema(spec.get("schema"), where, max_tokens)
    return StructuredOutput(StructuredKind.JSON_SCHEMA, schema=schema)


def _parallel_tool_calls(body: Mapping[str, Any]) -> bool:
    """OpenAI's `parallel_tool_calls` (default true); false: a reply holds at most one call, which
    the grammar enforces wherever the reply is decoded under one (forced calls, strict tools)."""
    value = body.get("parallel_tool_calls", True)
    if not isinstance(value, bool):
        raise ValueError(f"'parallel_tool_calls' must be a boolean, got {value!r}")
    return value


def _tool_choice(
    choice: Any, tools: Sequence[Mapping[str, Any]], max_tokens: int, parallel: bool = True
) -> StructuredOutput | None:
    if choice == "none":
        return None
    if choice in (None, "auto"):
        if not any(tool["function"].get("strict") is True for tool in tools):
            return None
        kind = StructuredKind.TEXT_OR_TOOL_CALLS
        wanted = None
    elif choice == "required":
        kind = StructuredKind.TOOL_CALL
        wanted = None
    elif isinstance(choice, dict) and choice.get("type") == "function" and isinstance(choice.get("function"), dict):
        kind = StructuredKind.TOOL_CALL
        wanted = choice["function"].get("name")
        if not isinstance(wanted, str) or not wanted:
            raise ValueError("'tool_choice.function.name' must be a non-empty string")
    else:
        raise ValueError(
            "'tool_choice' must be 'auto', 'none', 'required' or {'type': 'function', 'function': {'name': ...}}"
        )
    if not tools:
        raise ValueError("'tool_choice' needs 'tools'")
    names = [tool["function"]["name"] for tool in tools]
    if wanted is not None and wanted not in names:
        raise ValueError(f"'tool_choice' names function {wanted!r}, which is not in 'tools' ({names})")
    chosen = [(i, tool["function"]) for i, tool in enumerate(tools) if wanted in (None, tool["function"]["name"])]
    schemas = tuple(
        ToolSchema(
            function["name"],
            NO_PARAMETERS
            if function.get("parameters") is None
            else _usable_schema(function["parameters"], f"tools[{i}].function.parameters", max_tokens),
        )
        for i, function in chosen
    )
    return StructuredOutput(kind, tools=schemas, single_call=wanted is not None or not parallel)


def _usable_schema(schema: Any, where: str, max_tokens: int) -> str:
    """`schema` as decoded (`decoding_schema`), as JSON text, once llguidance has compiled it."""
    if not isinstance(schema, dict):
        raise ValueError(f"'{where}' must be a JSON Schema object, got {type(schema).__name__}")
    decoded = decoding_schema(schema, max_tokens)
    error = grammar.schema_error(decoded)
    if error:
        raise ValueError(f"'{where}' is not a usable JSON Schema: {error}")
    return json.dumps(decoded)
