"""How cached KV reaches a prefill engine (DESIGN.md, DualPath KV loading): the path, and the one
load plan the scheduler's path policy produces and the prefill engine follows."""

from __future__ import annotations

import enum
from dataclasses import dataclass


class KVPath(enum.Enum):
    A = "A"  # store -> the prefill engine's storage NIC
    B = "B"  # store -> a decode engine's storage NIC -> compute network -> the prefill engine
    SPLIT = "SPLIT"  # some blocks by A, the others by B, concurrently


@dataclass(frozen=True)
class LoadPlan:
    """How to load a turn's store hits. B relays them all through the engine at `relay_address`;
    SPLIT relays the last `relay_blocks` of them and reads the rest by A."""

    path: KVPath = KVPath.A
    relay_address: str = ""
    relay_blocks: int = 0  # SPLIT only

    def __post_init__(self) -> None:
        if self.relay_blocks < 0:
            raise ValueError(f"relay_blocks must be >= 0, got {self.relay_blocks}")
        if self.path is not KVPath.A and not self.relay_address:
            raise ValueError(f"kv path {self.path.value} needs a relay_address")

    @property
    def relayed(self) -> bool:
        return self.path is not KVPath.A


PATH_A = LoadPlan(KVPath.A)
