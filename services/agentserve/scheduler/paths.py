"""Path policies: how a turn's store hits reach its prefill engine (DualPath KV loading).

Path A reads them over the prefill engine's storage NIC; path B over the turn's decode engine's
storage NIC, relayed to the prefill engine over the compute network (the decode engine keeps them,
so the handoff after prefill skips them). In a PD cluster the decode engines' storage NICs sit
mostly idle, so B adds read bandwidth exactly when the prefill's storage NIC is the bottleneck.

A policy is a plain object with `choose`, like the routers, so a benchmark compares policies in one
run and a simulator reuses them. `make_path_policy` builds one by its config name.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

from agentserve.kv.paths import KVPath
from agentserve.scheduler.registry import Engine


@dataclass(frozen=True)
class PathPlan:
    path: KVPath
    relay_blocks: int = 0  # SPLIT: how many of the blocks to load go by B (the last ones)

    def __post_init__(self) -> None:
        if self.relay_blocks < 0:
            raise ValueError(f"relay_blocks must be >= 0, got {self.relay_blocks}")


PATH_A = PathPlan(KVPath.A)
PATH_B = PathPlan(KVPath.B)


class PathPolicy(Protocol):
    name: str

    def choose(self, prefill: Engine, decode: Engine, hit_blocks: int) -> PathPlan:
        """The path for a turn whose prompt has `hit_blocks` leading blocks in the store, prefilled
        on `prefill` and decoded on `decode` (the relay for B). Called on the event loop; must not
        block and must not change the engines."""
        ...


class AlwaysA:
    """The baseline without DualPath: every load over the prefill engine's storage NIC."""

    name = "always-a"

    def choose(self, prefill: Engine, decode: Engine, hit_blocks: int) -> PathPlan:
        return PATH_A


class AlwaysB:
    """Every load relayed by the decode engine (tests, and the other end of a comparison)."""

    name = "always-b"

    def choose(self, prefill: Engine, decode: Engine, hit_blocks: int) -> PathPlan:
        return PATH_B if hit_blocks else PATH_A


class DualPathPolicy:
    """The shorter storage-NIC read queue wins: B when the decode engine's snic has fewer bytes
    waiting than the prefill engine's, else A (ties go to A: one hop, no relay).

    Queues are what the engines' heartbeats report, or the reads routed there since if those are
    more (`Engine.snic_queue_bytes`), so a burst of turns between two heartbeats spreads over both
    paths instead of all reading the stale picture."""

    name = "dualpath"

    def choose(self, prefill: Engine, decode: Engine, hit_blocks: int) -> PathPlan:
        if hit_blocks == 0:
            return PATH_A
        return PATH_B if decode.snic_queue_bytes < prefill.snic_queue_bytes else PATH_A


POLICIES: dict[str, type] = {policy.name: policy for policy in (DualPathPolicy, AlwaysA, AlwaysB)}


def make_path_policy(name: str) -> PathPolicy:
    """The policy called `name` (dualpath, always-a, always-b); ValueError names the choices."""
    try:
        return POLICIES[name]()
    except KeyError:
        raise ValueError(f"unknown kv path policy {name!r}; choose one of {', '.join(POLICIES)}") from None
