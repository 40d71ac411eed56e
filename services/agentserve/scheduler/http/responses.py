"""The OpenAI response objects the gateway sends, built from the core's turn events.

Plain dict builders and an accumulator, so the wire shapes are tested without HTTP.
"""

from __future__ import annotations

import time
import uuid
from dataclasses import dataclass, field
from typing import Any, Literal

from agentserve.scheduler.http.core_api import TurnEventAPI

# The core's finish reasons mapped to OpenAI's vocabulary; unknown reasons pass through.
FINISH_REASONS = {"eos": "stop", "stop": "stop", "length": "length", "max_tokens": "length"}


def openai_finish_reason(reason: str | None) -> str | None:
    if reason is None or reason == "":
        return None
    return FINISH_REASONS.get(reason, reason)


@dataclass
class Reply:
    """Everything one request's events add up to: usage, the whole text, the finish reason."""

    text_parts: list[str] = field(default_factory=list)
    token_ids: list[int] = field(default_factory=list)
    prompt_tokens: int = 0
    cached_tokens: int = 0
    completion_tokens: int = 0
    finish_reason: str | None = None
    finished: bool = False
    trace_id: str = ""

    def add(self, event: TurnEventAPI) -> None:
        if event.metadata is not None:
            self.prompt_tokens = int(event.metadata.prompt_tokens)
            self.cached_tokens = int(event.metadata.cached_tokens)
            self.trace_id = event.metadata.trace_id or ""
        self.token_ids.extend(event.token_ids)
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

    def usage(self) -> dict[str, Any]:
        return {
            "prompt_tokens": self.prompt_tokens,
            "completion_tokens": self.completion_tokens,
            "total_tokens": self.prompt_tokens + self.completion_tokens,
            "prompt_tokens_details": {"cached_tokens": self.cached_tokens},
        }


@dataclass(frozen=True)
class ReplyFormat:
    """The shape of one response: chat (`chat.completion[.chunk]`) or text (`text_completion`)."""

    kind: Literal["chat", "text"]
    model: str
    include_usage: bool = False
    id: str = ""
    created: int = 0

    @classmethod
    def new(cls, kind: Literal["chat", "text"], model: str, include_usage: bool = False) -> ReplyFormat:
        prefix = "chatcmpl-" if kind == "chat" else "cmpl-"
        return cls(kind, model, include_usage, prefix + uuid.uuid4().hex, int(time.time()))

    def _envelope(self, object_: str, choices: list[dict[str, Any]]) -> dict[str, Any]:
        return {"id": self.id, "object": object_, "created": self.created, "model": self.model, "choices": choices}

    def _chunk(self, choice: dict[str, Any]) -> dict[str, Any]:
        object_ = "chat.completion.chunk" if self.kind == "chat" else "text_completion"
        chunk = self._envelope(object_, [{"index": 0, **choice}])
        if self.include_usage:
            chunk["usage"] = None  # as OpenAI: only the extra last chunk carries usage
        return chunk

    def role_chunk(self) -> dict[str, Any] | None:
        """Chat streams open with the assistant role; text streams have no such chunk."""
        if self.kind != "chat":
            return None
        return self._chunk({"delta": {"role": "assistant", "content": ""}, "logprobs": None, "finish_reason": None})

    def delta_chunk(self, text: str) -> dict[str, Any]:
        if self.kind == "chat":
            return self._chunk({"delta": {"content": text}, "logprobs": None, "finish_reason": None})
        return self._chunk({"text": text, "logprobs": None, "finish_reason": None})

    def finish_chunk(self, finish_reason: str | None) -> dict[str, Any]:
        if self.kind == "chat":
            return self._chunk({"delta": {}, "logprobs": None, "finish_reason": finish_reason})
        return self._chunk({"text": "", "logprobs": None, "finish_reason": finish_reason})

    def usage_chunk(self, reply: Reply) -> dict[str, Any]:
        object_ = "chat.completion.chunk" if self.kind == "chat" else "text_completion"
        return {**self._envelope(object_, []), "usage": reply.usage()}

    def full(self, reply: Reply) -> dict[str, Any]:
        """The non-streaming response."""
        if self.kind == "chat":
            choice = {
                "index": 0,
                "message": {"role": "assistant", "content": reply.text},
                "logprobs": None,
                "finish_reason": reply.finish_reason,
            }
            body = self._envelope("chat.completion", [choice])
        else:
            choice = {"index": 0, "text": reply.text, "logprobs": None, "finish_reason": reply.finish_reason}
            body = self._envelope("text_completion", [choice])
        body["usage"] = reply.usage()
        return body
