"""KV lifecycle policies: what to do with a session's KV while it waits on a tool.

A policy only decides, from the predicted wait and what a reload costs; `KVParking` acts. Chosen
by name in the scheduler config (`kv_lifecycle`), so a benchmark can run each on one workload:

- `lru`: nothing moves; the KV stays in the decode engine's pool until LRU evicts it (vLLM-like).
- `ttl-pin`: the KV is pinned in the decode engine's pool for the tool's predicted duration, then
  is an ordinary cached block again (Continuum-like: the pool pays for the wait in space).
- `offload`: on every tool start the KV leaves the pool (it is in the store); nothing uploads it
  back, so the next turn loads it on demand.
- `tokencake`: offload when the wait beats the reload cost and upload before the predicted return,
  but on one engine's view: back into the engine it left (TokenCake ran on one GPU), so a busy or
  dead holder is not traded for another engine.
- `agentserve`: when the predicted wait beats the reload cost, drop the KV from the engine's pool
  and upload it again into the engine chosen cluster-wide for the next turn, timed to finish
  before the earliest likely return, pinned there until the predicted return. With
  `kv_offload=demote` it is demoted instead of dropped: it stays resident, hinted with its return
  time, so the pool gives it up only when it needs the room, and then in order of next use (the
  `hinted` eviction policy); the upload then goes to the engine that still holds it unless that
  one is busier, and moves only what left; shorter waits are pinned in place for their duration.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Literal, Protocol

UploadTarget = Literal["cluster", "source"]


@dataclass(frozen=True)
class ParkPlan:
    offload: bool  # the KV may leave the engine's pool for the wait
    upload_after_s: float | None = None  # from the call's start; None: the next turn loads on demand
    upload_to: UploadTarget = "cluster"  # "cluster": chosen cluster-wide; "source": the engine it left
    pin_s: float = 0.0  # not offloaded: hold the KV in the engine's pool this long (0 = no pin)
    drop: bool = True  # offloaded: drop it now; False: demote it (evicted first, only when room is needed)


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


class TTLPin:
    """Pin for the predicted (median) duration: a return within it finds its KV, whatever else ran."""

    name = "ttl-pin"

    def on_tool_started(self, typical_s: float, early_s: float, blocks: int) -> ParkPlan:
        return ParkPlan(offload=False, pin_s=typical_s) if blocks and typical_s > 0 else KEEP


class OffloadOnly:
    """Every wait frees the pool; every return pays the reload (no prediction used)."""

    name = "offload"

    def on_tool_started(self, typical_s: float, early_s: float, blocks: int) -> ParkPlan:
        return ParkPlan(offload=True) if blocks else KEEP


class AgentServeLifecycle:
    """Offload when the wait is worth `breakeven` reloads (and at least `min_wait_s`: short waits
    are not worth two RPCs); upload `lead` reload times before the earliest likely return.
    `drop=False` demotes instead (the pool evicts the KV only when it needs the room) and pins a
    shorter wait for its predicted duration."""

    name = "agentserve"
    upload_to: UploadTarget = "cluster"

    def __init__(
        self,
        reload_s_per_block: float,
        min_wait_s: float = 0.5,
        breakeven: float = 2.0,
        lead: float = 1.5,
        drop: bool = True,
    ) -> None:
        """`drop`: offload by dropping the KV at the wait's start; False: demote it."""
        for key, value in (("reload_s_per_block", reload_s_per_block), ("min_wait_s", min_wait_s)):
            if not 0 <= value < math.inf:
                raise ValueError(f"{key} must be a finite number >= 0, got {value}")
        if not 1 <= breakeven < math.inf or not 1 <= lead < math.inf:
            raise ValueError(f"breakeven and lead must be finite numbers >= 1, got {breakeven}, {lead}")
        self.reload_s_per_block = reload_s_per_block
        self.min_wait_s = min_wait_s
        self.breakeven = breakeven
        self.lead = lead
        self.drop = drop

    def on_tool_started(self, typical_s: float, early_s: float, blocks: int) -> ParkPlan:
        reload_s = blocks * self.reload_s_per_block
        if blocks == 0:
            return KEEP
        if typical_s < max(self.min_wait_s, self.breakeven * reload_s):
            return ParkPlan(offload=False, pin_s=typical_s) if not self.drop and typical_s > 0 else KEEP
        upload_after_s = max(0.0, min(early_s, typical_s) - self.lead * reload_s)
        return ParkPlan(offload=True, upload_after_s=upload_after_s, upload_to=self.upload_to, drop=self.drop)


class TokenCakeLifecycle(AgentServeLifecycle):
    """AgentServe's timing on one engine's view: the upload goes back to the engine it left."""

    name = "tokencake"
    upload_to: UploadTarget = "source"


LIFECYCLE_POLICIES = ("lru", "ttl-pin", "offload", "tokencake", "agentserve")
OFFLOAD_MODES = ("drop", "demote")  # how `agentserve` offloads (the scheduler's `kv_offload`)


def make_lifecycle_policy(
    name: str, reload_s_per_block: float, min_wait_s: float, offload: str = "drop"
) -> LifecyclePolicy:
    """The policy called `name` (`offload`: how `agentserve` offloads, one of OFFLOAD_MODES);
    ValueError naming the choices if there is none."""
    if offload not in OFFLOAD_MODES:
        raise ValueError(f"kv_offload must be one of {', '.join(OFFLOAD_MODES)}, got {offload!r}")
    if name == "lru":
        return KeepResident()
    if name == "ttl-pin":
        return TTLPin()
    if name == "offload":
        return OffloadOnly()
    if name == "tokencake":
        return TokenCakeLifecycle(reload_s_per_block, min_wait_s)
    if name == "agentserve":
        return AgentServeLifecycle(reload_s_per_block, min_wait_s, drop=offload == "drop")
    raise ValueError(f"kv_lifecycle must be one of {', '.join(LIFECYCLE_POLICIES)}, got {name!r}")
