"""Tool-wait state of a session, fed by the tool proxy's ToolCallStarted/Finished events.

Recorded only, for now: later policies offload an idle session's KV while it waits and prefetch it
back before the predicted return, and use the measured durations to predict the next wait.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field

# Enough finished calls to estimate a tool's typical duration without growing per session forever.
HISTORY_LIMIT = 64


@dataclass(frozen=True)
class ToolCall:
    session_id: str
    tool: str
    call_id: str
    start_unix_s: float = 0.0
    predicted_duration_s: float = 0.0
    actual_duration_s: float = 0.0  # finished calls only
    ok: bool = True

    def __post_init__(self) -> None:
        if not self.session_id:
            raise ValueError("tool call event needs a session_id")
        if not self.call_id:
            raise ValueError("tool call event needs a call_id")
        if self.predicted_duration_s < 0 or self.actual_duration_s < 0:
            raise ValueError("tool call durations must not be negative")


@dataclass
class ToolWaitState:
    pending: dict[str, ToolCall] = field(default_factory=dict)  # by call id; agents run tools in parallel
    finished: deque[ToolCall] = field(default_factory=lambda: deque(maxlen=HISTORY_LIMIT))
    total_wait_s: float = 0.0

    @property
    def waiting(self) -> bool:
        return bool(self.pending)

    def started(self, call: ToolCall) -> None:
        self.pending[call.call_id] = call

    def ended(self, call: ToolCall) -> None:
        # A finish without a start (proxy restarted mid-call) still counts as a measured duration.
        self.pending.pop(call.call_id, None)
        self.finished.append(call)
        self.total_wait_s += call.actual_duration_s
