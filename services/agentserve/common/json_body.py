"""Parsing an HTTP request's JSON object body, with the same clear 400-worthy errors everywhere.

Beyond valid JSON, a body must nest at most `MAX_JSON_DEPTH` levels (a 100,000-deep array must not
reach a recursive consumer) and hold no lone UTF-16 surrogate (`"\\ud800"` decodes to a string no
UTF-8 encoder, tokenizer or response writer accepts). Both are checked in one iterative pass, so no
body can exhaust the stack. Large bodies are parsed off the event loop (`parse_json_object_async`).
"""

from __future__ import annotations

import asyncio
import json
import re
from typing import Any

MAX_JSON_DEPTH = 64  # tool schemas nest a few levels; nothing an API takes needs more
OFFLOAD_BYTES = 256 << 10  # bodies above this are parsed on a worker thread
_SURROGATE = re.compile("[\ud800-\udfff]")  # a well-formed pair decodes to one character; these are lone


def parse_json_object(raw: bytes, what: str = "request body", max_depth: int = MAX_JSON_DEPTH) -> dict[str, Any]:
    """`raw` as a JSON object; ValueError (HTTP 400) for invalid JSON, another JSON type, nesting
    deeper than `max_depth` or a lone surrogate."""
    try:
        body = json.loads(raw)
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise ValueError(f"{what} is not valid JSON: {exc}") from None
    except RecursionError:
        raise ValueError(f"{what} nests deeper than {max_depth} levels") from None
    if not isinstance(body, dict):
        raise ValueError(f"{what} must be a JSON object, got {type(body).__name__}")
    check_json_value(body, what, max_depth)
    return body


async def parse_json_object_async(raw: bytes, what: str = "request body") -> dict[str, Any]:
    """`parse_json_object`, on a worker thread when `raw` is large, so other requests and the
    engines' heartbeats keep being served meanwhile."""
    if len(raw) <= OFFLOAD_BYTES:
        return parse_json_object(raw, what)
    return await asyncio.to_thread(parse_json_object, raw, what)


def check_json_value(value: Any, what: str, max_depth: int = MAX_JSON_DEPTH) -> None:
    """ValueError if parsed JSON `value` nests deeper than `max_depth` or holds a lone surrogate."""
    stack: list[tuple[Any, int]] = [(value, 1)]
    while stack:
        item, depth = stack.pop()
        if isinstance(item, str):
            if _SURROGATE.search(item):
                raise ValueError(f"{what} holds a lone UTF-16 surrogate (\\ud800-\\udfff), which is not text")
        elif isinstance(item, (dict, list)):
            if depth > max_depth:
                raise ValueError(f"{what} nests deeper than {max_depth} levels")
            children = [*item.keys(), *item.values()] if isinstance(item, dict) else item
            stack.extend((child, depth + 1) for child in children)
