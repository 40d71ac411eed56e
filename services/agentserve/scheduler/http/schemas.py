"""Parse and validate OpenAI-style request bodies into typed requests, without HTTP.

Every check raises `ValueError` with a message a client can act on; the app answers it with a
400. Unknown fields are ignored, because clients such as aiperf send vendor extras; fields whose
meaning we cannot honour (n > 1, stop strings) are rejected rather than silently dropped.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from agentserve.common.json_body import parse_json_object  # noqa: F401 - the routes' body parser
from agentserve.contracts import MAX_TOKENS_LIMIT, SamplingParams

# OpenAI's endpoints default to "as many as fit"; a bounded default keeps a forgotten max_tokens
# from holding a decode slot for the whole context.
DEFAULT_MAX_TOKENS = 256
DEFAULT_TEMPERATURE = 1.0  # OpenAI's default, so unmodified clients see the sampling they expect
MAX_TEMPERATURE = 2.0
ROLES = frozenset({"system", "developer", "user", "assistant", "tool"})
SYSTEM_ROLES = frozenset({"system", "developer"})
# Message fields chat templates read besides role and content (tool calling).
TEMPLATE_EXTRAS = ("name", "tool_calls", "tool_call_id")
SESSION_ID_PATTERN = re.compile(r"[A-Za-z0-9._:\-]{1,128}")


@dataclass(frozen=True)
class Message:
    role: str
    content: str
    extras: tuple[tuple[str, Any], ...] = ()

    def template_dict(self) -> dict[str, Any]:
        return {"role": self.role, "content": self.content, **dict(self.extras)}


@dataclass(frozen=True)
class ChatRequest:
    messages: tuple[Message, ...]
    sampling: SamplingParams
    stream: bool = False
    include_usage: bool = False
    model: str | None = None


@dataclass(frozen=True)
class CompletionRequest:
    prompt: str | tuple[int, ...]
    sampling: SamplingParams = field(default_factory=SamplingParams)
    stream: bool = False
    include_usage: bool = False
    model: str | None = None


def parse_chat_request(body: Mapping[str, Any]) -> ChatRequest:
    raw = body.get("messages")
    if not isinstance(raw, list) or not raw:
        raise ValueError("'messages' must be a non-empty list of {'role', 'content'} objects")
    messages = tuple(_parse_message(i, m) for i, m in enumerate(raw))
    last = messages[-1]
    if last.role != "assistant" and not last.content.strip():
        # The request's new message is what the model answers; an empty one is a client bug.
        raise ValueError(f"messages[{len(messages) - 1}].content is empty")
    stream, include_usage = _parse_stream(body)
    return ChatRequest(messages, parse_sampling(body), stream, include_usage, _parse_model(body))


def parse_completion_request(body: Mapping[str, Any], vocab_size: int) -> CompletionRequest:
    stream, include_usage = _parse_stream(body)
    return CompletionRequest(
        _parse_prompt(body.get("prompt"), vocab_size), parse_sampling(body), stream, include_usage, _parse_model(body)
    )


def parse_sampling(body: Mapping[str, Any]) -> SamplingParams:
    n = body.get("n")
    if n is not None and (_is_bad_int(n) or n != 1):
        raise ValueError(f"'n' must be 1 (one choice per request), got {n!r}")
    stop = body.get("stop")
    if stop not in (None, "", []):
        raise ValueError("'stop' sequences are not supported; omit 'stop'")
    max_tokens = body.get("max_completion_tokens")
    key = "max_completion_tokens"
    if max_tokens is None:
        max_tokens, key = body.get("max_tokens"), "max_tokens"
    if max_tokens is None:
        max_tokens = DEFAULT_MAX_TOKENS
    elif _is_bad_int(max_tokens) or not 1 <= max_tokens <= MAX_TOKENS_LIMIT:
        raise ValueError(f"'{key}' must be an integer in [1, {MAX_TOKENS_LIMIT}], got {max_tokens!r}")
    temperature = _number(body, "temperature", DEFAULT_TEMPERATURE, 0.0, MAX_TEMPERATURE)
    top_p = _number(body, "top_p", 1.0, 0.0, 1.0)
    if top_p == 0.0:
        raise ValueError("'top_p' must be in (0, 1]; use temperature 0 for greedy decoding")
    seed = body.get("seed")
    if seed is not None and (_is_bad_int(seed) or not 0 <= seed < 2**63):
        raise ValueError(f"'seed' must be a non-negative 63-bit integer, got {seed!r}")
    ignore_eos = body.get("ignore_eos", False)  # vLLM extension benchmarks use for fixed lengths
    if not isinstance(ignore_eos, bool):
        raise ValueError(f"'ignore_eos' must be a boolean, got {ignore_eos!r}")
    return SamplingParams(max_tokens=max_tokens, temperature=temperature, top_p=top_p, seed=seed, ignore_eos=ignore_eos)


def parse_session_id(value: str | None) -> str | None:
    """The X-Session-Id header: None when absent or blank."""
    if value is None or not value.strip():
        return None
    value = value.strip()
    if not SESSION_ID_PATTERN.fullmatch(value):
        raise ValueError("X-Session-Id must be 1-128 characters of letters, digits and . _ : -")
    return value


def _parse_message(index: int, raw: Any) -> Message:
    if not isinstance(raw, dict):
        raise ValueError(f"messages[{index}] must be an object, got {type(raw).__name__}")
    role = raw.get("role")
    if role not in ROLES:
        raise ValueError(f"messages[{index}].role must be one of {sorted(ROLES)}, got {role!r}")
    content = raw.get("content")
    if content is None and role == "assistant":  # an assistant turn that only called tools
        content = ""
    extras = tuple((k, raw[k]) for k in TEMPLATE_EXTRAS if raw.get(k) is not None)
    return Message(role, _content_text(index, content), extras)


def _content_text(index: int, content: Any) -> str:
    """Plain text, or the OpenAI list-of-parts form when every part is text."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        texts = []
        for part in content:
            if not isinstance(part, dict) or part.get("type") != "text" or not isinstance(part.get("text"), str):
                raise ValueError(f"messages[{index}].content parts must be {{'type': 'text', 'text': str}}")
            texts.append(part["text"])
        return "".join(texts)
    raise ValueError(
        f"messages[{index}].content must be a string or a list of text parts, got {type(content).__name__}"
    )


def _parse_prompt(prompt: Any, vocab_size: int) -> str | tuple[int, ...]:
    # OpenAI accepts a batch as a list of prompts; a batch of exactly one is unwrapped.
    if isinstance(prompt, list) and len(prompt) == 1 and isinstance(prompt[0], (str, list)):
        prompt = prompt[0]
    if isinstance(prompt, str):
        if not prompt:
            raise ValueError("'prompt' must not be empty")
        return prompt
    if isinstance(prompt, list) and prompt:
        if all(isinstance(p, (str, list)) for p in prompt):
            raise ValueError("batched prompts are not supported; send one prompt per request")
        for i, token in enumerate(prompt):
            if _is_bad_int(token) or not 0 <= token < vocab_size:
                raise ValueError(f"prompt[{i}] must be a token id in [0, {vocab_size}), got {token!r}")
        return tuple(prompt)
    raise ValueError("'prompt' must be a non-empty string or a non-empty list of token ids")


def _parse_stream(body: Mapping[str, Any]) -> tuple[bool, bool]:
    stream = body.get("stream")
    if stream is None:
        stream = False
    if not isinstance(stream, bool):
        raise ValueError(f"'stream' must be a boolean, got {stream!r}")
    options = body.get("stream_options")
    if options is None:
        return stream, False
    if not isinstance(options, dict):
        raise ValueError("'stream_options' must be an object")
    include_usage = options.get("include_usage", False)
    if not isinstance(include_usage, bool):
        raise ValueError(f"'stream_options.include_usage' must be a boolean, got {include_usage!r}")
    return stream, include_usage


def _parse_model(body: Mapping[str, Any]) -> str | None:
    model = body.get("model")
    if model is not None and not isinstance(model, str):
        raise ValueError(f"'model' must be a string, got {type(model).__name__}")
    return model or None


def _number(body: Mapping[str, Any], key: str, default: float, low: float, high: float) -> float:
    value = body.get(key)
    if value is None:
        return default
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise ValueError(f"'{key}' must be a number, got {value!r}")
    if not low <= value <= high:
        raise ValueError(f"'{key}' must be in [{low}, {high}], got {value}")
    return float(value)


def _is_bad_int(value: Any) -> bool:
    return isinstance(value, bool) or not isinstance(value, int)
