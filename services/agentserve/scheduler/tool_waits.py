"""Tool-wait state of a session, fed by the tool proxy's ToolCallStarted/Finished events.

The KV lifecycle (`kv_parking.py`) reads it: a session's first pending call may park its KV, the
last one to finish ends the parking.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field

from agentserve.contracts import ToolCall

# Enough finished calls to estimate a tool's typical duration without growing per session forever.
HISTORY_LIMIT = 64


@dataclass
class ToolWaitState:
    pending: dict[str, ToolCall] = field(default_factory=dict)  # by call id; agents run tools in parallel
    finished: deque[ToolCall] = field(default_factory=lambda: deque(maxlen=HISTORY_LIMIT))
    total_wait_s: float = 0.0
    returned: bool = False  # its calls all finished and no turn has run since: the next turn is a return

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
        self.returned = not self.pending
