"""The OpenAI response objects the gateway sends, built from the core's turn events.

Plain dict builders and accumulators, so the wire shapes are tested without HTTP. A request with
`n` choices runs `n` generations; each is a `Reply`, and each event is tagged with its choice.
"""

from __future__ import annotations

import itertools
import time
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from agentserve.scheduler.http.core_api import TurnEventAPI
from agentserve.scheduler.tool_calls import ToolCall, ToolCallStream, parse_tool_calls

# The core's finish reasons mapped to OpenAI's vocabulary; unknown reasons pass through.
FINISH_REASONS = {"eos": "stop", "stop": "stop", "length": "length", "max_tokens": "length"}


def openai_finish_reason(reason: str | None) -> str | None:
    if reason is None or reason == "":
        return None
    return FINISH_REASONS.get(reason, reason)


@dataclass
class Reply:
    """Everything one choice's events add up to: usage, the whole text, the finish reason."""

    index: int = 0
    text_parts: list[str] = field(default_factory=list)
    token_ids: list[int] = field(default_factory=list)
    logprobs: list[Any] = field(default_factory=list)  # TokenLogprob, one per token when asked for
    prompt_tokens: int = 0
    cached_tokens: int = 0
    completion_tokens: int = 0
    finish_reason: str | None = None
    finished: bool = False
    trace_id: str = ""
    tool_stream: ToolCallStream = field(default_factory=ToolCallStream)  # streaming replies with tools
    tool_calls: int = 0  # calls streamed so far

    def add(self, event: TurnEventAPI) -> None:
        if event.metadata is not None:
            self.prompt_tokens = int(event.metadata.prompt_tokens)
            self.cached_tokens = int(event.metadata.cached_tokens)
            self.trace_id = event.metadata.trace_id or ""
        self.token_ids.extend(event.token_ids)
        self.logprobs.extend(getattr(event, "logprobs", ()))
        if event.text:
            self.text_parts.append(event.text)
        if event.finished:
            self.finished = True
            self.finish_reason = openai_finish_reason(event.finish_reason)
        # The final event carries the authoritative count; earlier ones may leave it at 0.
        self.completion_tokens = max(self.completion_tokens, int(event.completion_tokens), len(self.token_ids))

    @property
    def text(self) -> str:
        return "".join(self.text_parts)


def usage(replies: Sequence[Reply]) -> dict[str, Any]:
    prompt = replies[0].prompt_tokens if replies else 0
    completion = sum(r.completion_tokens for r in replies)
    return {
        "prompt_tokens": prompt,
        "completion_tokens": completion,
        "total_tokens": prompt + completion,
        "prompt_tokens_details": {"cached_tokens": replies[0].cached_tokens if replies else 0},
    }


@dataclass(frozen=True)
class ReplyFormat:
    """The shape of one response: chat (`chat.completion[.chunk]`) or text (`text_completion`).

    `parse_tools`: chat replies are split into content and `tool_calls` (`scheduler.tool_calls`).
    `grammar_calls`: the tool calls were decoded under a grammar, so a call the reply ends inside
    was cut by max_tokens: it is dropped, never returned as raw markup in the content.
    `token_text`: how logprobs name a token (None: the response carries no logprobs).
    """

    kind: Literal["chat", "text"]
    model: str
    include_usage: bool = False
    id: str = ""
    created: int = 0
    parse_tools: bool = False
    token_text: Callable[[int], str] | None = None
    grammar_calls: bool = False

    @classmethod
    def new(
        cls,
        kind: Literal["chat", "text"],
        model: str,
        include_usage: bool = False,
        *,
        parse_tools: bool = False,
        token_text: Callable[[int], str] | None = None,
        grammar_calls: bool = False,
    ) -> ReplyFormat:
        prefix = "chatcmpl-" if kind == "chat" else "cmpl-"
        created = int(time.time())
        return cls(
            kind, model, include_usage, prefix + uuid.uuid4().hex, created, parse_tools, token_text, grammar_calls
        )

    def _envelope(self, object_: str, choices: list[dict[str, Any]]) -> dict[str, Any]:
        return {"id": self.id, "object": object_, "created": self.created, "model": self.model, "choices": choices}

    def _chunk(self, index: int, choice: dict[str, Any]) -> dict[str, Any]:
        object_ = "chat.completion.chunk" if self.kind == "chat" else "text_completion"
        chunk = self._envelope(object_, [{"index": index, **choice}])
        if self.include_usage:
            chunk["usage"] = None  # as OpenAI: only the extra last chunk carries usage
        return chunk

    def role_chunk(self, index: int = 0) -> dict[str, Any] | None:
        """Chat streams open with the assistant role; text streams have no such chunk."""
        if self.kind != "chat":
            return None
        return self._chunk(
            index, {"delta": {"role": "assistant", "content": ""}, "logprobs": None, "finish_reason": None}
        )

    def delta_chunk(self, text: str, index: int = 0, logprobs: Sequence[Any] = ()) -> dict[str, Any]:
        lp = self._logprobs(logprobs) if logprobs else None
        if self.kind == "chat":
            return self._chunk(index, {"delta": {"content": text}, "logprobs": lp, "finish_reason": None})
        return self._chunk(index, {"text": text, "logprobs": lp, "finish_reason": None})

    def tool_call_chunk(self, call: ToolCall, position: int, index: int = 0) -> dict[str, Any]:
        """A whole call in one delta (clients concatenate `arguments` deltas; one is a valid stream)."""
        delta = {"tool_calls": [{"index": position, **_tool_call(call)}]}
        return self._chunk(index, {"delta": delta, "logprobs": None, "finish_reason": None})

    def finish_chunk(self, finish_reason: str | None, index: int = 0) -> dict[str, Any]:
        if self.kind == "chat":
            return self._chunk(index, {"delta": {}, "logprobs": None, "finish_reason": finish_reason})
        return self._chunk(index, {"text": "", "logprobs": None, "finish_reason": finish_reason})

    def usage_chunk(self, replies: Sequence[Reply]) -> dict[str, Any]:
        object_ = "chat.completion.chunk" if self.kind == "chat" else "text_completion"
        return {**self._envelope(object_, []), "usage": usage(replies)}

    def stream_chunks(self, reply: Reply, event: TurnEventAPI) -> list[dict[str, Any]]:
        """The chunks one event of `reply`'s choice adds to a stream (after `reply.add(event)`)."""
        logprobs = list(getattr(event, "logprobs", ()))
        pieces: list[str | ToolCall] = [event.text] if event.text else []
        if self.parse_tools:
            pieces = reply.tool_stream.feed(event.text)
            if event.finished:
                pieces += reply.tool_stream.finish(self.grammar_calls)
        chunks = []
        for piece in pieces:
            if isinstance(piece, ToolCall):
                chunks.append(self.tool_call_chunk(piece, reply.tool_calls, reply.index))
                reply.tool_calls += 1
            else:
                chunks.append(self.delta_chunk(piece, reply.index, logprobs))
                logprobs = []
        if logprobs and self.token_text is not None:  # tokens whose text is still held back
            chunks.append(self.delta_chunk("", reply.index, logprobs))
        if event.finished:
            chunks.append(self.finish_chunk(self._finish_reason(reply, reply.tool_calls > 0), reply.index))
        return chunks

    def full(self, replies: Sequence[Reply]) -> dict[str, Any]:
        """The non-streaming response."""
        choices = [self._full_choice(reply) for reply in replies]
        body = self._envelope("chat.completion" if self.kind == "chat" else "text_completion", choices)
        body["usage"] = usage(replies)
        return body

    def _full_choice(self, reply: Reply) -> dict[str, Any]:
        lp = self._logprobs(reply.logprobs) if self.token_text is not None else None
        if self.kind == "text":
            return {"index": reply.index, "text": reply.text, "logprobs": lp, "finish_reason": reply.finish_reason}
        message: dict[str, Any] = {"role": "assistant", "content": reply.text}
        called = False
        if self.parse_tools:
            parsed = parse_tool_calls(reply.text, self.grammar_calls)
            message["content"] = parsed.content
            if parsed.tool_calls:
                message["tool_calls"] = [_tool_call(c) for c in parsed.tool_calls]
                called = True
        finish = self._finish_reason(reply, called)
        return {"index": reply.index, "message": message, "logprobs": lp, "finish_reason": finish}

    @staticmethod
    def _finish_reason(reply: Reply, called: bool) -> str | None:
        # As OpenAI: a reply that ended by itself after calling tools finished for "tool_calls".
        return "tool_calls" if called and reply.finish_reason == "stop" else reply.finish_reason

    def _logprobs(self, entries: Sequence[Any]) -> dict[str, Any] | None:
        if self.token_text is None:
            return None
        name = self.token_text
        if self.kind == "chat":
            return {
                "content": [
                    {
                        **_chat_token(name(e.token_id), e.logprob),
                        "top_logprobs": [_chat_token(name(t), lp) for t, lp in e.top],
                    }
                    for e in entries
                ]
            }
        tokens = [name(e.token_id) for e in entries]
        offsets = list(itertools.accumulate((len(t) for t in tokens[:-1]), initial=0)) if tokens else []
        return {
            "tokens": tokens,
            "token_logprobs": [e.logprob for e in entries],
            "top_logprobs": [{name(t): lp for t, lp in e.top} for e in entries],
            "text_offset": offsets,  # where each token's text starts in this choice's text
        }


def _chat_token(text: str, logprob: float) -> dict[str, Any]:
    return {"token": text, "logprob": logprob, "bytes": list(text.encode())}


def _tool_call(call: ToolCall) -> dict[str, Any]:
    return {"id": call.id, "type": "function", "function": {"name": call.name, "arguments": call.arguments}}
