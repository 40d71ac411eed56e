"""Predicts how long a tool call will take: the running mean of that tool's observed durations.

The scheduler uses the prediction to decide whether offloading a waiting session's KV pays off
and when to prefetch it back, so a tool never seen before borrows the mean of all tools (any
evidence beats none) and falls back to a configured default only when nothing was observed yet.
"""

from __future__ import annotations

import math
from dataclasses import dataclass


@dataclass
class ToolStats:
    calls: int = 0
    mean_s: float = 0.0


class ToolDurationPredictor:
    def __init__(self, default_s: float = 1.0) -> None:
        if not math.isfinite(default_s) or default_s < 0:
            raise ValueError(f"default_s must be a non-negative number, got {default_s}")
        self._default_s = default_s
        self._stats: dict[str, ToolStats] = {}
        self._all = ToolStats()

    def observe(self, tool: str, duration_s: float) -> None:
        if not math.isfinite(duration_s) or duration_s < 0:
            raise ValueError(f"duration_s must be a non-negative number, got {duration_s}")
        for stats in (self._stats.setdefault(tool, ToolStats()), self._all):
            stats.calls += 1
            stats.mean_s += (duration_s - stats.mean_s) / stats.calls  # incremental mean, no sum to overflow

    def predict(self, tool: str) -> float:
        stats = self._stats.get(tool)
        if stats is not None:
            return stats.mean_s
        return self._all.mean_s if self._all.calls else self._default_s

    def stats(self, tool: str) -> ToolStats:
        stats = self._stats.get(tool, ToolStats())
        return ToolStats(stats.calls, stats.mean_s)
