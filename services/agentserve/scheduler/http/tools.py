"""The tool-calling fields of a chat request (`tools`, `tool_choice`, assistant `tool_calls`), checked.

What the gateway hands the chat template is what Hermes / Qwen2.5 templates expect: the tool
definitions as sent, and each earlier call's `arguments` decoded from OpenAI's JSON string into the
object the template prints (see `model_files.presets.CHAT_TEMPLATE`).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from agentserve.common.json_body import check_json_value
from agentserve.contracts.structured import TOOL_NAME_PATTERN
from agentserve.structured.strict_schema import check_strict

FUNCTION_FIELDS = frozenset({"name", "description", "parameters", "strict"})


@dataclass(frozen=True)
class ToolSettings:
    """The request's tools and how the reply may use them.

    The tools are in the prompt either way (as vLLM does by default, and as a session needs: its
    prompt lists them from its first turn on). choice "auto": calls in the reply are parsed into
    `tool_calls`, and when a tool is `strict` the reply is decoded under a grammar in which free
    text may hold calls whose arguments match their schemas; "required" and "function" (a named
    function): the reply is decoded under a grammar that makes it those calls
    (`scheduler.http.structured`); "none": the reply is returned as plain text.
    """

    tools: tuple[dict[str, Any], ...] = ()
    choice: str = "none"

    @property
    def parse_calls(self) -> bool:
        return bool(self.tools) and self.choice != "none"

    @property
    def strict(self) -> bool:
        """Some tool is `strict: true`: its calls' arguments must match its schema."""
        return any(tool["function"].get("strict") is True for tool in self.tools)

    @property
    def grammar_calls(self) -> bool:
        """The reply's tool calls are decoded under a grammar (see the class docstring)."""
        return bool(self.tools) and (self.choice in ("required", "function") or (self.choice == "auto" and self.strict))

    @property
    def prompt_tools(self) -> list[dict[str, Any]] | None:
        """The tools the chat template lists, or None for a prompt without tools."""
        return list(self.tools) or None


def parse_tools(body: dict[str, Any]) -> ToolSettings:
    raw = body.get("tools")
    choice = body.get("tool_choice")
    if raw is None or raw == []:
        if choice not in (None, "none"):
            raise ValueError("'tool_choice' needs 'tools'")
        return ToolSettings()
    if not isinstance(raw, list):
        raise ValueError("'tools' must be a list of {'type': 'function', 'function': {...}} objects")
    tools = tuple(_parse_tool(i, t) for i, t in enumerate(raw))
    names = [t["function"]["name"] for t in tools]
    if len(set(names)) != len(names):
        raise ValueError(f"'tools' names a function twice: {names}")
    return ToolSettings(tools, parse_tool_choice(choice))


def parse_tool_choice(choice: Any) -> str:
    """ "auto" (the default with tools), "none", "required", or "function" for a named function
    (`scheduler.http.structured` checks the name and builds the grammar that forces the call)."""
    if choice is None or choice in ("auto", "none", "required"):
        return choice or "auto"
    if isinstance(choice, dict):
        return "function"
    raise ValueError(f"'tool_choice' must be 'auto', 'none', 'required' or a named function, got {choice!r}")


def parse_assistant_tool_calls(index: int, raw: Any) -> list[dict[str, Any]]:
    """An assistant message's `tool_calls`, with each call's `arguments` decoded to an object."""
    where = f"messages[{index}].tool_calls"
    if not isinstance(raw, list):
        raise ValueError(f"{where} must be a list")
    calls = []
    for i, call in enumerate(raw):
        function = call.get("function") if isinstance(call, dict) else None
        if not isinstance(function, dict) or call.get("type", "function") != "function":
            raise ValueError(f"{where}[{i}] must be {{'id', 'type': 'function', 'function': {{'name', 'arguments'}}}}")
        name, arguments = function.get("name"), function.get("arguments", "{}")
        if not isinstance(name, str) or not name:
            raise ValueError(f"{where}[{i}].function.name must be a non-empty string")
        try:
            decoded = json.loads(arguments) if isinstance(arguments, str) else None
        except (ValueError, RecursionError):
            decoded = None
        check_json_value(decoded, f"{where}[{i}].function.arguments")
        if not isinstance(decoded, dict):
            raise ValueError(f"{where}[{i}].function.arguments must be a JSON object encoded as a string")
        calls.append({"id": call.get("id", ""), "type": "function", "function": {"name": name, "arguments": decoded}})
    return calls


def _parse_tool(index: int, tool: Any) -> dict[str, Any]:
    where = f"tools[{index}]"
    if not isinstance(tool, dict) or tool.get("type") != "function" or not isinstance(tool.get("function"), dict):
        raise ValueError(f"{where} must be {{'type': 'function', 'function': {{'name', ...}}}}")
    if set(tool) - {"type", "function"}:
        raise ValueError(f"{where} has unsupported fields {sorted(set(tool) - {'type', 'function'})}")
    function = tool["function"]
    unknown = set(function) - FUNCTION_FIELDS
    if unknown:
        raise ValueError(f"{where}.function has unsupported fields {sorted(unknown)}")
    name = function.get("name")
    if not isinstance(name, str) or not TOOL_NAME_PATTERN.fullmatch(name):
        raise ValueError(f"{where}.function.name must be 1-64 letters, digits, _ or -, got {name!r}")
    if not isinstance(function.get("description", ""), str):
        raise ValueError(f"{where}.function.description must be a string")
    if not isinstance(function.get("parameters", {}), dict):
        raise ValueError(f"{where}.function.parameters must be a JSON schema object")
    strict = function.get("strict")
    if strict is not None and not isinstance(strict, bool):
        raise ValueError(f"{where}.function.strict must be a boolean, got {strict!r}")
    if strict and "parameters" in function:
        check_strict(function["parameters"], f"{where}.function.parameters")
    return {"type": "function", "function": dict(function)}
