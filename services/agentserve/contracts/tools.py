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
    caller_predicted_s: float = 0.0  # the caller's own estimate of the duration (0 = none given)

    def __post_init__(self) -> None:
        if not self.call_id:
            raise ValueError("tool call event needs a call_id")
        for name in ("predicted_duration_s", "actual_duration_s", "caller_predicted_s"):
            value = getattr(self, name)
            if not 0 <= value < float("inf"):
                raise ValueError(f"{name} must be a finite number of seconds >= 0, got {value}")
