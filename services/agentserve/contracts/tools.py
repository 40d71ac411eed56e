"""A tool call an agent made through the tool proxy: the event the proxy reports and the
scheduler's tool-wait state records."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class ToolCall:
    session_id: str  # empty for a call made outside any session (the proxy reports none of those)
    tool: str
    call_id: str
    start_unix_s: float = 0.0
    predicted_duration_s: float = 0.0
    actual_duration_s: float = 0.0  # finished calls only
    ok: bool = True  # finished calls: whether the tool succeeded

    def __post_init__(self) -> None:
        if not self.call_id:
            raise ValueError("tool call event needs a call_id")
        if self.predicted_duration_s < 0 or self.actual_duration_s < 0:
            raise ValueError("tool call durations must not be negative")
