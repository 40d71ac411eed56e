"""Path policies: how a turn's store hits reach its prefill engine (DualPath KV loading).

Path A reads them over the prefill engine's storage NIC; path B over a decode engine's storage NIC
(the relay, chosen by a `RelayPolicy`), relayed to the prefill engine over the compute network. In
a PD cluster the decode engines' storage NICs sit mostly idle, so B adds read bandwidth exactly
when the prefill's storage NIC is the bottleneck. SPLIT reads some blocks each way at once.

A policy is a plain object with `choose`, like the routers, so a benchmark compares policies in one
run and a simulator reuses them. `make_path_policy` builds one by its config name.
"""

from __future__ import annotations

import math
from typing import Protocol

from agentserve.common.config import check_choice
from agentserve.contracts import PATH_A, KVPath, LoadPlan
from agentserve.scheduler.registry import Engine


class PathPolicy(Protocol):
    name: str

    def choose(self, prefill: Engine, relay: Engine, hit_blocks: int) -> LoadPlan:
        """The path for a turn whose prompt has `hit_blocks` leading blocks in the store, prefilled
        on `prefill`, with `relay` the decode engine that would relay path B. Called on the event
        loop; must not block and must not change the engines."""
        ...


class AlwaysA:
    """The baseline without DualPath: every load over the prefill engine's storage NIC."""

    name = "always-a"

    def choose(self, prefill: Engine, relay: Engine, hit_blocks: int) -> LoadPlan:
        return PATH_A


class AlwaysB:
    """Every load relayed by a decode engine (tests, and the other end of a comparison)."""

    name = "always-b"

    def choose(self, prefill: Engine, relay: Engine, hit_blocks: int) -> LoadPlan:
        return _relayed_by(relay) if hit_blocks else PATH_A


class DualPathPolicy:
    """The shorter storage-NIC read queue wins: B when the relay's snic has fewer bytes waiting
    than the prefill engine's, else A. Equal queues (at low load mostly both empty) go to the NIC
    that carried fewer read bytes lately (`Engine.recent_bytes`), so the storage NICs of both sides
    share the reads evenly over time; a full tie goes to A (one hop, no relay).

    Queues are what the engines' heartbeats report, or the backlog of the reads routed there since
    if that is more (`Engine.snic_queue_bytes`), so a burst of turns between two heartbeats spreads
    over both paths instead of all reading the stale picture."""

    name = "dualpath"

    def choose(self, prefill: Engine, relay: Engine, hit_blocks: int) -> LoadPlan:
        if hit_blocks == 0:
            return PATH_A
        return _relayed_by(relay) if _snic_load(relay) < _snic_load(prefill) else PATH_A


class SplitPolicy:
    """One turn's blocks over both paths at once, in proportion to each side's free bandwidth
    (DualPath's stated future work), so both legs finish together.

    Side A is the prefill's snic: rate `r_A`, backlog `q_A` bytes. Side B is the relay's store read
    feeding its compute-NIC send: rate `r_B = min(snic, cnic rate)`, backlog the slower leg's drain
    time in bytes at `r_B`. A side's free bandwidth over a horizon `T` is its rate less what its
    backlog needs in `T`: `free(T) = r - q / T`. Reading `X` bytes with `x_B = free_B(T) * T` by B and
    the rest by A finishes both sides at `T = (q_A + q_B + X) / (r_A + r_B)`, the earliest any split
    can finish. A side whose backlog alone outlasts `T` gets nothing (all by the other); an unshaped
    side (infinite rate) takes everything, two unshaped sides share evenly. The B share rounds to
    whole blocks: 0 blocks is plain A, all of them plain B."""

    name = "split"

    def choose(self, prefill: Engine, relay: Engine, hit_blocks: int) -> LoadPlan:
        if hit_blocks == 0:
            return PATH_A
        relayed = round(hit_blocks * b_share(prefill, relay, hit_blocks * _block_bytes(prefill, relay)))
        if relayed == 0:
            return PATH_A
        if relayed == hit_blocks:
            return _relayed_by(relay)
        return LoadPlan(KVPath.SPLIT, relay_address=relay.address, relay_blocks=relayed)


def b_share(prefill: Engine, relay: Engine, nbytes: int) -> float:
    """The fraction of `nbytes` that path B should read so both paths finish together (SplitPolicy)."""
    rate_a = prefill.bytes_per_s("snic")
    rate_b = min(relay.bytes_per_s("snic"), relay.bytes_per_s("cnic"))
    if math.isinf(rate_a) or math.isinf(rate_b):
        return 0.5 if rate_a == rate_b else float(math.isinf(rate_b))
    queue_a = prefill.snic_queue_bytes
    queue_b = max(relay.queue_s("snic"), relay.queue_s("cnic")) * rate_b
    finish_s = (queue_a + queue_b + nbytes) / (rate_a + rate_b)
    return min(1.0, max(0.0, (rate_b * finish_s - queue_b) / nbytes)) if nbytes else 0.0


def _snic_load(engine: Engine) -> tuple[int, float]:
    """Storage-NIC load to compare sides by: the queue now, then the bytes it read lately."""
    return engine.snic_queue_bytes, engine.recent_bytes("snic")


def _block_bytes(prefill: Engine, relay: Engine) -> int:
    # Every engine serves the same model and block size; 1 stands in when neither reported its size
    # (the proportion is then by blocks, which is the same thing on an empty fabric).
    return prefill.status.kv_block_bytes or relay.status.kv_block_bytes or 1


def _relayed_by(relay: Engine) -> LoadPlan:
    return LoadPlan(KVPath.B, relay_address=relay.address)


POLICIES: dict[str, type] = {policy.name: policy for policy in (DualPathPolicy, AlwaysA, AlwaysB, SplitPolicy)}


def make_path_policy(name: str) -> PathPolicy:
    """The policy called `name` (dualpath, always-a, always-b, split); ValueError names the choices."""
    check_choice("kv_path_policy", name, POLICIES)
    policy: PathPolicy = POLICIES[name]()
    return policy
