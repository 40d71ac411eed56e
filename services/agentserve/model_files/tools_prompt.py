"""The documented tools format, written into the messages for chat templates that do not render tools.

A template renders tools when it reads the `tools` variable (Qwen2.5, Llama 3.1, Hermes, the tiny
model's). One that does not (SmolLM2's, plain ChatML) would drop the request's tools and print tool
calls and tool results as bare roles. For such a template the tools go into the messages it does
render, in the Hermes / Qwen2.5 format the server documents (README, "Tool calls"), decodes tool-call
grammars in (`agentserve.structured.grammar`) and parses replies with:

- the tool list joins the leading system message, or opens one (which replaces a template's default
  system prompt, as a caller's own system message would);
- an assistant message's `tool_calls` become `<tool_call>` blocks after its content;
- consecutive `tool` messages become one user message of `<tool_response>` blocks.

The text is the one the tiny model's template renders itself (`model_files.presets.CHAT_TEMPLATE`),
so a ChatML template renders the same prompt either way.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

import jinja2
import jinja2.ext
import jinja2.meta

from agentserve.model_files.presets import TOOLS_INSTRUCTIONS, TOOLS_PREAMBLE


def renders_tools(source: str) -> bool:
    """The chat template `source` reads the `tools` variable, so it lists the tools it is given."""
    parsed = jinja2.Environment(extensions=[jinja2.ext.loopcontrols]).parse(source)
    return "tools" in jinja2.meta.find_undeclared_variables(parsed)


def needs_tools_prompt(messages: Sequence[Mapping[str, Any]], tools: Sequence[Mapping[str, Any]] | None) -> bool:
    """The request has tools, calls or tool results that a template without tool support would lose."""
    return bool(tools) or any(m.get("role") == "tool" or m.get("tool_calls") for m in messages)


def with_tools_prompt(
    messages: Sequence[Mapping[str, Any]], tools: Sequence[Mapping[str, Any]] | None
) -> list[dict[str, Any]]:
    """`messages` with `tools`, tool calls and tool results written as text (see the module docstring)."""
    out: list[dict[str, Any]] = []
    after_tool = False  # the last message out is a user message of tool responses
    for message in messages:
        role = message.get("role")
        if role == "tool":
            response = f"<tool_response>\n{message['content']}\n</tool_response>"
            if after_tool:
                out[-1]["content"] += "\n" + response
            else:
                out.append({"role": "user", "content": response})
        elif role == "assistant" and message.get("tool_calls"):
            parts = [message["content"]] if message.get("content") else []
            parts += [_call_block(call) for call in message["tool_calls"]]
            out.append({"role": "assistant", "content": "\n".join(parts)})
        else:
            out.append({key: value for key, value in message.items() if key not in ("tool_calls", "tool_call_id")})
        after_tool = role == "tool"
    if tools:
        listing = TOOLS_PREAMBLE + "".join("\n" + _tojson(tool) for tool in tools) + TOOLS_INSTRUCTIONS
        if out and out[0].get("role") == "system":
            out[0] = {**out[0], "content": out[0]["content"] + "\n\n" + listing}
        else:
            out.insert(0, {"role": "system", "content": listing})
    return out


def _call_block(call: Mapping[str, Any]) -> str:
    function = call.get("function", call)
    name, arguments = _tojson(function["name"]), _tojson(function["arguments"])
    return f'<tool_call>\n{{"name": {name}, "arguments": {arguments}}}\n</tool_call>'


def _tojson(value: Any) -> str:
    # The chat templates' tojson (model_files.tokenizer): no HTML escaping, non-ASCII kept.
    return json.dumps(value, ensure_ascii=False)
