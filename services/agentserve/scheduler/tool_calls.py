"""Tool calls in model output, in the Hermes / Qwen2.5 format the chat template teaches the model.

A reply may hold any number of blocks, each one call:

    <tool_call>
    {"name": "get_weather", "arguments": {"city": "Paris"}}
    </tool_call>

The text outside the blocks is the reply's content; whitespace next to a block is dropped (the
template separates blocks by newlines). A block whose body is not a JSON object with a string
`name` and an object `arguments` stays in the content, verbatim: output the client can still read
is better than a call it cannot make. So is a block the reply ends inside (cut by max_tokens),
unless the reply was decoded under a tool-call grammar (`drop_open_block`): there a block is always
a call, and one the reply ends inside is a call cut short, never content.

`ToolCallStream` splits a streamed reply as it arrives; `parse_tool_calls` runs it over a whole
reply, so the streamed and the non-streamed answer are the same by construction.
"""

from __future__ import annotations

import json
import uuid
from dataclasses import dataclass, field

from agentserve.contracts.structured import TOOL_CALL_CLOSE, TOOL_CALL_OPEN
from agentserve.scheduler.turn_text import partial_prefix_length

# The tags of the one format definition; the newlines inside them are whitespace next to a block.
OPEN = TOOL_CALL_OPEN.strip()
CLOSE = TOOL_CALL_CLOSE.strip()


@dataclass(frozen=True)
class ToolCall:
    """One parsed call: `arguments` is the JSON text of an object, as OpenAI's API carries it."""

    name: str
    arguments: str
    id: str = field(default_factory=lambda: "call_" + uuid.uuid4().hex[:24])


@dataclass(frozen=True)
class ParsedReply:
    content: str | None  # None when the reply is only tool calls (as OpenAI answers)
    tool_calls: tuple[ToolCall, ...]


def parse_tool_calls(text: str, drop_open_block: bool = False) -> ParsedReply:
    stream = ToolCallStream()
    pieces = [*stream.feed(text), *stream.finish(drop_open_block)]
    content = "".join(p for p in pieces if isinstance(p, str))
    calls = tuple(p for p in pieces if isinstance(p, ToolCall))
    return ParsedReply(None if calls and not content else content, calls)


def parse_call(body: str) -> ToolCall | None:
    """The call a block's body holds, or None if it is not `{"name": str, "arguments": object}`."""
    try:
        value = json.loads(body)
    except (ValueError, RecursionError):  # a model can nest brackets past the parser's stack
        return None
    if not isinstance(value, dict) or not isinstance(value.get("name"), str) or not value["name"]:
        return None
    arguments = value.get("arguments", {})
    if not isinstance(arguments, dict):
        return None
    return ToolCall(value["name"], json.dumps(arguments, ensure_ascii=False))


class ToolCallStream:
    """Splits streamed text into content and complete tool calls.

    `feed` returns what is certain so far: content strings and `ToolCall`s, in order. It holds back
    text that may still turn out to open a block (a prefix of `<tool_call>`), a block until its
    `</tool_call>` arrives, and whitespace that a following block would drop. `finish` returns the
    rest once the reply has ended.
    """

    def __init__(self) -> None:
        self._pending = ""  # text not yet returned: a partial tag, a block's body, or trailing whitespace
        self._inside = False  # `_pending` is the body of an open block
        self._gap = ""  # whitespace before the open block: dropped only if the block is a call
        self._after_block = False  # whitespace right after a block is dropped
        self.calls = 0  # tool calls returned so far (the next one's streaming index)

    def feed(self, text: str) -> list[str | ToolCall]:
        self._pending += text
        out: list[str | ToolCall] = []
        while True:
            if self._inside:
                end = self._pending.find(CLOSE)
                if end < 0:
                    return out
                body, self._pending = self._pending[:end], self._pending[end + len(CLOSE) :]
                self._inside = False
                call = parse_call(body)
                if call is None:
                    self._emit(out, self._gap + OPEN + body + CLOSE)
                else:
                    out.append(call)
                    self.calls += 1
                    self._after_block = True
                continue
            if self._after_block:
                self._pending = self._pending.lstrip()
                if not self._pending:
                    return out
                self._after_block = False
            start = self._pending.find(OPEN)
            if start >= 0:
                before = self._pending[:start]
                self._emit(out, before.rstrip())
                self._gap = before[len(before.rstrip()) :]
                self._pending = self._pending[start + len(OPEN) :]
                self._inside = True
                continue
            # Keep back a tail that may still grow into `<tool_call>`, and trailing whitespace.
            keep = partial_prefix_length(self._pending, OPEN)
            head = self._pending[: len(self._pending) - keep]
            certain = head.rstrip()
            self._emit(out, certain)
            self._pending = self._pending[len(certain) :]
            return out

    def finish(self, drop_open_block: bool = False) -> list[str | ToolCall]:
        """Everything held back, once no more text will come; `drop_open_block`: without the block
        the reply ended inside (a grammar-forced call cut by max_tokens)."""
        if self._inside and drop_open_block:
            self._pending, self._inside = "", False
        rest = (self._gap + OPEN if self._inside else "") + self._pending
        self._pending, self._inside = "", False
        if self._after_block:
            rest = rest.lstrip()
        out: list[str | ToolCall] = []
        self._emit(out, rest)
        return out

    @staticmethod
    def _emit(out: list[str | ToolCall], text: str) -> None:
        if text:
            out.append(text)
