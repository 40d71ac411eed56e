"""Parsing an HTTP request's JSON object body, with the same clear 400-worthy errors everywhere."""

from __future__ import annotations

import json
from typing import Any


def parse_json_object(raw: bytes, what: str = "request body") -> dict[str, Any]:
    """`raw` as a JSON object; ValueError (HTTP 400) for invalid JSON or another JSON type."""
    try:
        body = json.loads(raw)
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise ValueError(f"request body is not valid JSON: {exc}") from None
    if not isinstance(body, dict):
        raise ValueError(f"{what} must be a JSON object, got {type(body).__name__}")
    return body
