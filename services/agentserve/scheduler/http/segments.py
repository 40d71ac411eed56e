"""The chat route's extension field for all-gather rounds: `agentserve_segments` (TokenDance).

    "agentserve_segments": {
        "round": 3,
        "shared": [{"content_id": "job7/r2/agent5", "text": "..."}, ...],   # or "token_ids": [...]
        "reuse": "reuse",               # or "exact" (default "reuse")
        "recompute_fraction": 0.15      # reuse only; default: the server's
    }

OpenAI clients send it with `extra_body`. The messages are rendered as they would be without it;
the field only says which parts of the new message are blocks other agents' prompts hold too
(each block's text on lines of its own), so a server that ignores it answers the same in exact mode.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

from agentserve.contracts.segments import ReuseMode, ReusePolicy
from agentserve.contracts.turn_segments import SharedRef, TurnSegments

FIELD = "agentserve_segments"
_KEYS = frozenset({"round", "shared", "reuse", "recompute_fraction"})
_BLOCK_KEYS = frozenset({"content_id", "text", "token_ids"})


def parse_segments(body: Mapping[str, Any]) -> TurnSegments | None:
    """The request's segments (None without the field); ValueError naming the field."""
    raw = body.get(FIELD)
    if raw is None:
        return None
    if not isinstance(raw, dict):
        raise ValueError(f"{FIELD} must be an object")
    unknown = sorted(set(raw) - _KEYS)
    if unknown:
        raise ValueError(f"{FIELD} has unknown keys {unknown}; it accepts {sorted(_KEYS)}")
    shared = raw.get("shared")
    if not isinstance(shared, list):
        raise ValueError(f"{FIELD}.shared must be a list of objects with content_id and one of text or token_ids")
    try:
        return TurnSegments(raw.get("round", 0), tuple(_block(i, b) for i, b in enumerate(shared)), _reuse(raw))
    except ValueError as exc:
        raise ValueError(f"{FIELD}.{exc}") from None


def _block(index: int, raw: Any) -> SharedRef:
    if not isinstance(raw, dict) or set(raw) - _BLOCK_KEYS:
        raise ValueError(f"shared[{index}] must be an object of {sorted(_BLOCK_KEYS)}")
    content_id, text, token_ids = raw.get("content_id"), raw.get("text", ""), raw.get("token_ids", [])
    if not isinstance(content_id, str):
        raise ValueError(f"shared[{index}].content_id must be a string")
    if not isinstance(text, str):
        raise ValueError(f"shared[{index}].text must be a string")
    if not isinstance(token_ids, list):
        raise ValueError(f"shared[{index}].token_ids must be a list of token ids")
    return SharedRef(content_id, tuple(token_ids), text)


def _reuse(raw: Mapping[str, Any]) -> ReusePolicy:
    mode = raw.get("reuse", ReuseMode.REUSE.value)
    modes = [m.value for m in ReuseMode]
    if mode not in modes:
        raise ValueError(f"reuse must be one of {modes}, got {mode!r}")
    fraction = raw.get("recompute_fraction")
    if mode == ReuseMode.EXACT.value:
        if fraction is not None:
            raise ValueError("recompute_fraction applies to reuse 'reuse' only, not 'exact'")
        return ReusePolicy(ReuseMode.EXACT)
    if fraction is None:
        return ReusePolicy(ReuseMode.REUSE)
    if isinstance(fraction, bool) or not isinstance(fraction, (int, float)) or not math.isfinite(fraction):
        raise ValueError(f"recompute_fraction must be a number, got {fraction!r}")
    try:
        return ReusePolicy(ReuseMode.REUSE, fraction)
    except ValueError as exc:
        raise ValueError(f"reuse: {exc}") from None
