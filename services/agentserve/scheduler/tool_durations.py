"""How long a tool call will take, learned online per tool name.

Each tool keeps a window of its recent durations and is read at a quantile: the median says
whether parking a session's KV pays off, a low quantile says how early its owner may be back (the
upload must be done by then). Before a tool has history the estimate comes, in order, from the
caller's own prediction (it knows the arguments), the configured seed, the tool proxy's running
mean, and finally a default.
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Mapping

DEFAULT_WINDOW = 64


class ToolDurationModel:
    def __init__(self, seeds: Mapping[str, float] | None = None, default_s: float = 1.0, window: int = DEFAULT_WINDOW):
        seeds = dict(seeds or {})
        for tool, seconds in (*seeds.items(), ("default", default_s)):
            _check_seconds(f"seed for {tool}", seconds)
        if window < 1:
            raise ValueError(f"window must be positive, got {window}")
        self._seeds = seeds
        self._default_s = default_s
        self._window = window
        self._observed: dict[str, deque[float]] = {}

    def observe(self, tool: str, duration_s: float) -> None:
        _check_seconds("duration_s", duration_s)
        self._observed.setdefault(tool, deque(maxlen=self._window)).append(duration_s)

    def observations(self, tool: str) -> int:
        return len(self._observed.get(tool, ()))

    def predict(self, tool: str, quantile: float = 0.5, caller_s: float = 0.0, proxy_s: float = 0.0) -> float:
        """The `quantile` of `tool`'s recent durations (nearest rank); without any, the first of
        the caller's prediction, the seed, the proxy's prediction (0 = none given) and the default."""
        if not 0 <= quantile <= 1:
            raise ValueError(f"quantile must be in [0, 1], got {quantile}")
        if caller_s > 0:
            return caller_s
        observed = self._observed.get(tool)
        if observed:
            ordered = sorted(observed)
            return ordered[min(len(ordered) - 1, max(0, math.ceil(quantile * len(ordered)) - 1))]
        if tool in self._seeds:
            return self._seeds[tool]
        return proxy_s if proxy_s > 0 else self._default_s


def parse_seeds(text: str) -> dict[str, float]:
    """`name=seconds,name=seconds` (the scheduler's `tool_seeds` setting) as a dict."""
    seeds: dict[str, float] = {}
    for item in filter(None, (part.strip() for part in text.split(","))):
        name, sep, value = item.partition("=")
        try:
            seconds = float(value)
        except ValueError:
            seconds = -1.0
        if not sep or not name.strip():
            raise ValueError(f"tool_seeds: {item!r} is not name=seconds")
        _check_seconds(f"tool_seeds: {name.strip()}", seconds)
        seeds[name.strip()] = seconds
    return seeds


def _check_seconds(what: str, seconds: float) -> None:
    if not 0 <= seconds < math.inf:
        raise ValueError(f"{what} must be a finite number of seconds >= 0, got {seconds}")
