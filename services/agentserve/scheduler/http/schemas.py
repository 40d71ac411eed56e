"""Parse and validate OpenAI-style request bodies into typed requests, without HTTP.

Every check raises `ValueError` with a message a client can act on; the app answers it with a
400. A field outside `CHAT_FIELDS` / `COMPLETION_FIELDS` is rejected by name: a request that
asks for something the server would not do must fail, never be served as if it had not asked.
Besides OpenAI's fields, the vLLM extensions benchmark clients send are accepted: `ignore_eos`
and `min_tokens`; the chat route also takes agentserve's own `agentserve_segments` (segments.py).
"""

from __future__ import annotations

import dataclasses
import math
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from agentserve.common.json_body import parse_json_object  # noqa: F401 - the routes' body parser
from agentserve.contracts import MAX_LOGPROBS, MAX_TOKENS_LIMIT, SamplingParams
from agentserve.contracts.turn_segments import TurnSegments
from agentserve.scheduler.http.segments import FIELD as SEGMENTS_FIELD
from agentserve.scheduler.http.segments import parse_segments
from agentserve.scheduler.http.structured import parse_structured
from agentserve.scheduler.http.tools import ToolSettings, parse_assistant_tool_calls, parse_tools

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
MAX_CHOICES = 16  # `n`: each choice is a full generation
MAX_STOP_STRINGS = 4  # OpenAI's limit
# Fields both endpoints honour. `user` is an end-user id for the caller's own records.
SAMPLING_FIELDS = frozenset(
    {
        "model",
        "stream",
        "stream_options",
        "max_tokens",
        "temperature",
        "top_p",
        "seed",
        "n",
        "stop",
        "ignore_eos",
        "min_tokens",
        "logprobs",
        "user",
    }
)
CHAT_FIELDS = SAMPLING_FIELDS | {
    SEGMENTS_FIELD,
    "messages",
    "max_completion_tokens",
    "top_logprobs",
    "tools",
    "tool_choice",
    "parallel_tool_calls",
    "response_format",
}
COMPLETION_FIELDS = SAMPLING_FIELDS | {"prompt"}


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
    n: int = 1
    tools: ToolSettings = field(default_factory=ToolSettings)
    segments: TurnSegments | None = None  # the agentserve_segments extension (all-gather rounds)


@dataclass(frozen=True)
class CompletionRequest:
    prompt: str | tuple[int, ...]
    sampling: SamplingParams = field(default_factory=SamplingParams)
    stream: bool = False
    include_usage: bool = False
    model: str | None = None
    n: int = 1


def parse_chat_request(body: Mapping[str, Any]) -> ChatRequest:
    check_fields(body, CHAT_FIELDS)
    raw = body.get("messages")
    if not isinstance(raw, list) or not raw:
        raise ValueError("'messages' must be a non-empty list of {'role', 'content'} objects")
    messages = tuple(_parse_message(i, m) for i, m in enumerate(raw))
    last = messages[-1]
    if last.role != "assistant" and not last.content.strip():
        # The request's new message is what the model answers; an empty one is a client bug.
        raise ValueError(f"messages[{len(messages) - 1}].content is empty")
    stream, include_usage = _parse_stream(body)
    sampling = parse_sampling(body, _chat_logprobs(body))
    tools = parse_tools(dict(body))
    structured = parse_structured(body, tools.tools, sampling.max_tokens)
    if structured is not None:
        sampling = dataclasses.replace(sampling, structured=structured)
    segments = parse_segments(body)
    n = _parse_n(body)
    return ChatRequest(messages, sampling, stream, include_usage, _parse_model(body), n, tools, segments)


def parse_completion_request(body: Mapping[str, Any], vocab_size: int) -> CompletionRequest:
    check_fields(body, COMPLETION_FIELDS)
    stream, include_usage = _parse_stream(body)
    logprobs = body.get("logprobs")
    if logprobs is not None and (_is_bad_int(logprobs) or not 0 <= logprobs <= MAX_LOGPROBS):
        raise ValueError(f"'logprobs' must be an integer in [0, {MAX_LOGPROBS}], got {logprobs!r}")
    return CompletionRequest(
        _parse_prompt(body.get("prompt"), vocab_size),
        parse_sampling(body, logprobs),
        stream,
        include_usage,
        _parse_model(body),
        _parse_n(body),
    )


def check_fields(body: Mapping[str, Any], accepted: frozenset[str]) -> None:
    unknown = sorted(set(body) - accepted)
    if unknown:
        raise ValueError(
            f"unsupported field{'s' if len(unknown) > 1 else ''} {', '.join(repr(k) for k in unknown)}; "
            f"this server accepts {', '.join(sorted(accepted))}"
        )


def parse_sampling(body: Mapping[str, Any], logprobs: int | None = None) -> SamplingParams:
    """The sampling fields both endpoints share; `logprobs` is the endpoint's own reading of it."""
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
    min_tokens = body.get("min_tokens", 0)  # vLLM extension: no stop before this many tokens
    if min_tokens is None:
        min_tokens = 0
    if _is_bad_int(min_tokens) or not 0 <= min_tokens <= max_tokens:
        raise ValueError(f"'min_tokens' must be an integer in [0, max_tokens={max_tokens}], got {min_tokens!r}")
    return SamplingParams(
        max_tokens=max_tokens,
        temperature=temperature,
        top_p=top_p,
        seed=seed,
        ignore_eos=ignore_eos,
        min_tokens=min_tokens,
        logprobs=logprobs,
        stop=_parse_stop(body.get("stop")),
    )


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
    extras = {k: raw[k] for k in TEMPLATE_EXTRAS if raw.get(k) is not None}
    if "tool_calls" in extras:
        if role != "assistant":
            raise ValueError(f"messages[{index}].tool_calls is only allowed on assistant messages")
        extras["tool_calls"] = parse_assistant_tool_calls(index, extras["tool_calls"])
    return Message(role, _content_text(index, content), tuple(extras.items()))


def _chat_logprobs(body: Mapping[str, Any]) -> int | None:
    """Chat's `logprobs` (bool) and `top_logprobs` (alternatives per token) as one count."""
    logprobs, top = body.get("logprobs"), body.get("top_logprobs")
    if logprobs is not None and not isinstance(logprobs, bool):
        raise ValueError(f"'logprobs' must be a boolean, got {logprobs!r}")
    if top is not None:
        if _is_bad_int(top) or not 0 <= top <= MAX_LOGPROBS:
            raise ValueError(f"'top_logprobs' must be an integer in [0, {MAX_LOGPROBS}], got {top!r}")
        if not logprobs:
            raise ValueError("'top_logprobs' needs 'logprobs': true")
    return (top or 0) if logprobs else None


def _parse_n(body: Mapping[str, Any]) -> int:
    n = body.get("n")
    if n is None:
        return 1
    if _is_bad_int(n) or not 1 <= n <= MAX_CHOICES:
        raise ValueError(f"'n' must be an integer in [1, {MAX_CHOICES}], got {n!r}")
    return int(n)


def _parse_stop(stop: Any) -> tuple[str, ...]:
    if stop is None:
        return ()
    stops = [stop] if isinstance(stop, str) else stop
    if not isinstance(stops, list) or not all(isinstance(s, str) for s in stops):
        raise ValueError(f"'stop' must be a string or a list of strings, got {stop!r}")
    stops = [s for s in stops if s]  # an empty string stops nothing
    if len(stops) > MAX_STOP_STRINGS:
        raise ValueError(f"'stop' takes at most {MAX_STOP_STRINGS} strings, got {len(stops)}")
    return tuple(dict.fromkeys(stops))


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
