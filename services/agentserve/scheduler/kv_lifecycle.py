"""KV lifecycle policies: what to do with a session's KV while it waits on a tool.

A policy only decides, from the predicted wait and what a reload costs; `KVParking` acts. Chosen
by name in the scheduler config (`kv_lifecycle`), so a benchmark can run each on one workload:

- `lru`: nothing moves; the KV stays in the decode engine's pool until LRU evicts it (vLLM-like).
- `agentserve`: when the predicted wait beats the reload cost, drop the KV from the engine's pool
  (it is already in the store) and upload it again into the engine that will serve the next
  turn, timed to finish before the earliest likely return.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Protocol


@dataclass(frozen=True)
class ParkPlan:
    offload: bool
    upload_after_s: float | None = None  # from the call's start; None: the next turn loads on demand


KEEP = ParkPlan(offload=False)


class LifecyclePolicy(Protocol):
    name: str

    def on_tool_started(self, typical_s: float, early_s: float, blocks: int) -> ParkPlan:
        """The plan for a session that just started waiting on a tool expected to take `typical_s`
        (median) and maybe as little as `early_s`, holding `blocks` full KV blocks on its engine.
        Pure: called on the event loop."""
        ...


class KeepResident:
    name = "lru"

    def on_tool_started(self, typical_s: float, early_s: float, blocks: int) -> ParkPlan:
        return KEEP


class AgentServeLifecycle:
    """Offload when the wait is worth `breakeven` reloads (and at least `min_wait_s`: short waits
    are not worth two RPCs); upload `lead` reload times before the earliest likely return."""

    name = "agentserve"

    def __init__(
        self, reload_s_per_block: float, min_wait_s: float = 0.5, breakeven: float = 2.0, lead: float = 1.5
    ) -> None:
        for key, value in (("reload_s_per_block", reload_s_per_block), ("min_wait_s", min_wait_s)):
            if not 0 <= value < math.inf:
                raise ValueError(f"{key} must be a finite number >= 0, got {value}")
        if not 1 <= breakeven < math.inf or not 1 <= lead < math.inf:
            raise ValueError(f"breakeven and lead must be finite numbers >= 1, got {breakeven}, {lead}")
        self.reload_s_per_block = reload_s_per_block
        self.min_wait_s = min_wait_s
        self.breakeven = breakeven
        self.lead = lead

    def on_tool_started(self, typical_s: float, early_s: float, blocks: int) -> ParkPlan:
        reload_s = blocks * self.reload_s_per_block
        if blocks == 0 or typical_s < max(self.min_wait_s, self.breakeven * reload_s):
            return KEEP
        return ParkPlan(offload=True, upload_after_s=max(0.0, min(early_s, typical_s) - self.lead * reload_s))


LIFECYCLE_POLICIES = ("lru", "agentserve")


def make_lifecycle_policy(name: str, reload_s_per_block: float, min_wait_s: float) -> LifecyclePolicy:
    if name == "lru":
        return KeepResident()
    if name == "agentserve":
        return AgentServeLifecycle(reload_s_per_block, min_wait_s)
    raise ValueError(f"kv_lifecycle must be one of {', '.join(LIFECYCLE_POLICIES)}, got {name!r}")
