"""SimParking: `KVParking`'s moves in virtual time, decided by the scheduler's own lifecycle policy.

At a tool call's start the session's tool is predicted by the scheduler's `ToolDurationModel`
(the caller's prediction first, as the scheduler takes it), and the `LifecyclePolicy` plans:
keep (pinned in the holder's pool for `pin_s` when the plan says so), or offload: drop the
session's blocks from the holder's pool (the store has them) or demote them there (hinted with the
predicted return), then at `upload_after_s` upload them into the engine chosen for the next turn
(`source`: the one they left; `cluster`: the holder while it is no busier than the least loaded
engine, else that one) and pin them there until the predicted return. A return before the upload
begins cancels it, as `KVParking.finished` does; the next turn then loads what it lacks.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from agentserve.bench.common.workloads.model import ToolCall
from agentserve.scheduler.kv_lifecycle import LifecyclePolicy, ParkPlan
from agentserve.scheduler.kv_parking import EARLY_QUANTILE, ParkingStats
from agentserve.scheduler.tool_durations import ToolDurationModel
from agentserve.sim.agentaware.engine import CRITICAL_PRIORITY, AwareEngine
from agentserve.sim.events import EventLoop


@dataclass
class SessionKV:
    """Where a session's KV is: its holder engine and the ids of its context's full blocks."""

    session_id: str
    critical: bool
    holder: str = ""
    block_ids: list[bytes] = field(default_factory=list)
    parked: object | None = None  # the pending upload's token; None: nothing pending
    left: bool = False  # its KV left the holder during the current wait (dropped, or evicted before an upload)


class SimParking:
    def __init__(
        self,
        loop: EventLoop,
        policy: LifecyclePolicy,
        durations: ToolDurationModel,
        engines: dict[str, AwareEngine],
        least_loaded: Callable[[], AwareEngine],
    ) -> None:
        self.loop = loop
        self.policy = policy
        self.durations = durations
        self.engines = engines
        self.least_loaded = least_loaded
        self.stats = ParkingStats()

    def started(self, kv: SessionKV, tool: ToolCall) -> None:
        """The session's turn ended and its tool call started."""
        kv.left = False
        holder = self.engines.get(kv.holder)
        if holder is None or not kv.block_ids:
            return
        caller = tool.predicted_s or 0.0
        typical = self.durations.predict(tool.name, 0.5, caller)
        early = self.durations.predict(tool.name, EARLY_QUANTILE, caller)
        plan = self.policy.on_tool_started(typical, early, len(kv.block_ids))
        now = self.loop.now()
        priority = CRITICAL_PRIORITY if kv.critical else 0
        if not plan.offload:
            self.stats.kept += 1
            if plan.pin_s > 0:
                holder.hint_kv(kv.block_ids, None, None, plan.pin_s)
                self.stats.pinned += 1
            return
        self.stats.offloads += 1
        if plan.drop:
            self.stats.dropped_blocks += holder.drop(kv.block_ids)
            kv.left = True
        else:
            self.stats.demoted += 1
            holder.hint_kv(kv.block_ids, priority, typical)
        if plan.upload_after_s is None:
            return
        token = kv.parked = object()
        self.loop.after(plan.upload_after_s, lambda: self._upload(kv, token, plan, now + typical, priority))

    def finished(self, kv: SessionKV, tool: ToolCall) -> None:
        """The tool call returned: learn its duration; an upload not begun is cancelled."""
        if tool.duration_s > 0:
            self.durations.observe(tool.name, tool.duration_s)
        if kv.parked is not None:
            kv.parked = None
            self.stats.uploads_cancelled += 1

    def _upload(self, kv: SessionKV, token: object, plan: ParkPlan, return_at: float, priority: int) -> None:
        if kv.parked is not token:
            return  # back already, or parked again since
        kv.parked = None
        holder = self.engines.get(kv.holder)
        pick = self.least_loaded()
        if plan.upload_to == "source" and holder is not None:
            target = holder
        else:
            target = holder if holder is not None and holder.load <= pick.load else pick
        ids = list(kv.block_ids)

        def uploaded(loaded: int) -> None:
            self.stats.uploads += 1
            self.stats.uploaded_blocks += loaded
            kv.left = kv.left or loaded > 0
            kv.holder = target.engine_id
            remaining = return_at - self.loop.now()
            if remaining > 0:
                target.hint_kv(ids, priority, remaining, remaining)

        if not target.prefetch(ids, uploaded):
            self.stats.failures += 1
