"""How cached KV reaches a prefill engine (DESIGN.md, DualPath KV loading): the path, and the one
load plan the scheduler's path policy produces and the prefill engine follows."""

from __future__ import annotations

import dataclasses
import enum
import math
from dataclasses import dataclass


class KVPath(enum.Enum):
    A = "A"  # store -> the prefill engine's storage NIC
    B = "B"  # store -> a decode engine's storage NIC -> compute network -> the prefill engine
    SPLIT = "SPLIT"  # some blocks by A, the others by B, concurrently


@dataclass(frozen=True)
class LoadPlan:
    """How to load a turn's store hits. B relays them all through the engine at `relay_address`;
    SPLIT relays `relay_blocks` of them and reads the rest by A (see `blocks_by_b`)."""

    path: KVPath = KVPath.A
    relay_address: str = ""
    relay_blocks: int = 0  # SPLIT only
    # The relay sends the leading blocks it holds from its HBM and reads only the rest from the
    # store; False (DualPath's path B) reads every relayed block from the store.
    relay_hbm_first: bool = False

    def __post_init__(self) -> None:
        if self.relay_blocks < 0:
            raise ValueError(f"relay_blocks must be >= 0, got {self.relay_blocks}")
        if self.path is not KVPath.A and not self.relay_address:
            raise ValueError(f"kv path {self.path.value} needs a relay_address")

    @property
    def relayed(self) -> bool:
        return self.path is not KVPath.A

    def blocks_by_b(self, loading: int, hit_blocks: int) -> int:
        """How many of the `loading` blocks the prefill engine actually loads (the store hits it does
        not hold, the tail of the `hit_blocks`) go by path B: all on B, none on A, and on SPLIT the
        plan's share `relay_blocks / hit_blocks` of them, rounded half up. The share, not the count:
        the scheduler cannot see which hits the prefill engine already holds."""
        if self.path is KVPath.A or loading <= 0:
            return 0
        if self.path is KVPath.B or hit_blocks <= 0:
            return loading
        relay_blocks = min(self.relay_blocks, hit_blocks)
        return (2 * loading * relay_blocks + hit_blocks) // (2 * hit_blocks)

    def scaled_to(self, loading: int, hit_blocks: int) -> LoadPlan:
        """This plan for the `loading` blocks the prefill engine actually loads: a SPLIT relays
        `blocks_by_b` of them; A and B stand as they are."""
        if self.path is not KVPath.SPLIT:
            return self
        return dataclasses.replace(self, relay_blocks=self.blocks_by_b(loading, hit_blocks))


PATH_A = LoadPlan(KVPath.A)


MAX_KV_PIN_S = 3600.0  # a pin holds pool space from every other session: bounded by construction


@dataclass(frozen=True)
class KVHint:
    """What the scheduler's KV lifecycle tells a decode engine about blocks it may hold: hold them
    for `pin_s` (a guarantee the pool keeps by reference, whatever its eviction policy), and the
    session's `priority` and expected next use (advice to the pool's eviction policy)."""

    priority: int | None = None
    next_use_in_s: float | None = None
    pin_s: float = 0.0

    def __post_init__(self) -> None:
        if not 0 <= self.pin_s <= MAX_KV_PIN_S:
            raise ValueError(f"pin_s must be in [0, {MAX_KV_PIN_S:.0f}] seconds, got {self.pin_s}")
        if self.next_use_in_s is not None and not 0 <= self.next_use_in_s < math.inf:
            raise ValueError(f"next_use_in_s must be a finite number of seconds >= 0, got {self.next_use_in_s}")
