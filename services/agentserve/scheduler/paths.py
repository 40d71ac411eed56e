"""Path policies: how a turn's store hits reach its prefill engine (DualPath KV loading).

Path A reads them over the prefill engine's storage NIC; path B over the turn's decode engine's
storage NIC, relayed to the prefill engine over the compute network (the decode engine keeps them,
so the handoff after prefill skips them). In a PD cluster the decode engines' storage NICs sit
mostly idle, so B adds read bandwidth exactly when the prefill's storage NIC is the bottleneck.

A policy is a plain object with `choose`, like the routers, so a benchmark compares policies in one
run and a simulator reuses them. `make_path_policy` builds one by its config name.
"""

from __future__ import annotations

from typing import Protocol

from agentserve.contracts import PATH_A, KVPath, LoadPlan
from agentserve.scheduler.registry import Engine


class PathPolicy(Protocol):
    name: str

    def choose(self, prefill: Engine, decode: Engine, hit_blocks: int) -> LoadPlan:
        """The path for a turn whose prompt has `hit_blocks` leading blocks in the store, prefilled
        on `prefill` and decoded on `decode` (the relay for B). Called on the event loop; must not
        block and must not change the engines."""
        ...


class AlwaysA:
    """The baseline without DualPath: every load over the prefill engine's storage NIC."""

    name = "always-a"

    def choose(self, prefill: Engine, decode: Engine, hit_blocks: int) -> LoadPlan:
        return PATH_A


class AlwaysB:
    """Every load relayed by the decode engine (tests, and the other end of a comparison)."""

    name = "always-b"

    def choose(self, prefill: Engine, decode: Engine, hit_blocks: int) -> LoadPlan:
        return _relayed_by(decode) if hit_blocks else PATH_A


class DualPathPolicy:
    """The shorter storage-NIC read queue wins: B when the decode engine's snic has fewer bytes
    waiting than the prefill engine's, else A (ties go to A: one hop, no relay).

    Queues are what the engines' heartbeats report, or the reads routed there since if those are
    more (`Engine.snic_queue_bytes`), so a burst of turns between two heartbeats spreads over both
    paths instead of all reading the stale picture."""

    name = "dualpath"

    def choose(self, prefill: Engine, decode: Engine, hit_blocks: int) -> LoadPlan:
        if hit_blocks == 0:
            return PATH_A
        return _relayed_by(decode) if decode.snic_queue_bytes < prefill.snic_queue_bytes else PATH_A


def _relayed_by(decode: Engine) -> LoadPlan:
    return LoadPlan(KVPath.B, relay_address=decode.address)


POLICIES: dict[str, type] = {policy.name: policy for policy in (DualPathPolicy, AlwaysA, AlwaysB)}


def make_path_policy(name: str) -> PathPolicy:
    """The policy called `name` (dualpath, always-a, always-b); ValueError names the choices."""
    try:
        return POLICIES[name]()
    except KeyError:
        raise ValueError(f"unknown kv path policy {name!r}; choose one of {', '.join(POLICIES)}") from None
