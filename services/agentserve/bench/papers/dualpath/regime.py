"""Whether `bench dualpath` runs in DualPath's regime: prefill bound by its storage NIC.

DualPath's gain comes from a prefill engine that cannot read its turn's cached KV over its share of
the node's storage NIC as fast as it computes the turn's new tokens (the paper quotes ~22 GB of KV
per PFLOP for DeepSeek-V3.2 at 98.7% hit, 32.7K context and 429 new tokens a turn), while the
decode nodes' storage NICs sit idle. Two things decide whether a run is there:

- the turn's shape (`modelled`): a later turn's store read at one engine's storage-NIC share
  against its prefill compute, from the cost model the emulated engines sleep by. Read over compute
  above 1 is storage-bound per turn.
- the load (`measured`): enough agents per prefill engine that its storage NIC always has a read
  queued. With too few, every agent waits on its own chain of turns (decode, hand-off, the next
  turn) and the NICs idle however the turn is shaped; each policy's storage-NIC busy shares say
  which it was, and the layerwise run's prefill side (path A only, reads overlapped with compute)
  whether path A was the bottleneck.

`ideal_offline_ratio` is what the turn's shape allows a saturated cluster: the baseline's prefill
loads a turn's hits and then computes it (its pool holds about one context, so turns take their
turn), read + compute per turn; DualPath overlaps them (layerwise) and reads over every engine's
storage NIC, max(compute, read x P / (P + D)) per turn.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from agentserve.bench.common.workloads.model import Workload
from agentserve.costmodel.ratio import PAPER_TURN, TurnShape, cache_compute_ratio
from agentserve.costmodel.timing import ComputeCost
from agentserve.fabric.profiles import HardwareProfile

# A side whose busiest storage NIC was busy at least this share of the run was what bound it.
SATURATED = 0.8
# The policy whose prefill storage NICs say whether path A is the bottleneck: it reads over them
# only and overlaps the reads with compute (layerwise), so it waits on nothing else. The baseline
# loads a turn's hits and then computes it, so even saturated its NICs rest while it computes.
PATH_A_PROBES = ("layerwise", "baseline")


@dataclass(frozen=True)
class LaterTurns:
    """A workload's later turns (those with a cached context), summed: what the store serves."""

    turns: int
    cached_tokens: int
    new_tokens: int
    read_s: float  # target seconds, at one engine's storage-NIC share
    compute_s: float  # target seconds of prefill

    @property
    def read_over_compute(self) -> float:
        return self.read_s / self.compute_s


def later_turns(
    workload: Workload, cost: ComputeCost, snic_gbps: float, block_size: int = 1, tail_blocks: bool = False
) -> LaterTurns:
    """Every turn after a session's first: its context so far is cached in whole KV blocks of
    `block_size` tokens, the rest of it (the partial last block) and its appended tokens are new:
    what the engine reads and computes. With `tail_blocks` (the scheduler's, default on) the
    partial last block is stored too (`scheduler/tail_blocks.py`): read as one more whole block,
    and all of the context but its last token is cached (that token's KV the decode engine never
    computed, unless it completed a block)."""
    turns = cached = new = 0
    read_s = compute_s = 0.0
    bytes_per_s = snic_gbps * 1e9 / 8
    for s in workload.sessions:
        context = workload.prefixes[s.prefix] if s.prefix is not None else 0
        for i, t in enumerate(s.turns):
            if i:
                hit = read = context // block_size * block_size
                if tail_blocks and context % block_size:
                    hit = context - 1
                    read = -(-hit // block_size) * block_size
                computed = context - hit + t.new_tokens
                turns += 1
                cached += hit
                new += computed
                read_s += read * cost.model.kv_bytes_per_token / bytes_per_s
                compute_s += cost.prefill_s(hit, computed)
            context += t.new_tokens + t.output_tokens
    if not turns:
        raise ValueError("the workload has no later turns (every session has one turn)")
    return LaterTurns(turns, cached, new, read_s, compute_s)


def snic_share_gbps(profile: HardwareProfile) -> float:
    """One prefill engine's storage-NIC bandwidth in target Gbps (its share of the node's)."""
    if profile.node is not None:
        return profile.node.snic_share.gbps
    return profile.engines["prefill"].snic.gbps


def modelled(
    workload: Workload,
    cost: ComputeCost,
    profile: HardwareProfile,
    prefill: int,
    decode: int,
    block_size: int = 1,
    tail_blocks: bool = False,
) -> dict:
    """The regime the workload's later turns put the cluster in, in target terms, at KV blocks of
    `block_size` tokens (a turn recomputes its context's partial last block unless `tail_blocks`)."""
    gbps = snic_share_gbps(profile)
    later = later_turns(workload, cost, gbps, block_size, tail_blocks)
    read, compute = later.read_s / later.turns, later.compute_s / later.turns
    mean_turn = cache_compute_ratio(cost.model, _turn(later))
    paper = cache_compute_ratio(cost.model, PAPER_TURN)
    paper_read = PAPER_TURN.cached_tokens * cost.model.kv_bytes_per_token / (gbps * 1e9 / 8)
    agents = len(workload.sessions)
    return {
        "snic_gbps_per_engine": gbps,
        "kv_block_tokens": block_size,
        "tail_blocks": tail_blocks,
        "later_turn": {
            "cached_tokens": round(later.cached_tokens / later.turns),
            "new_tokens": round(later.new_tokens / later.turns),
            "read_s": round(read, 4),
            "compute_s": round(compute, 4),
            "read_over_compute": round(later.read_over_compute, 3),
            "cache_compute_gb_per_pflop": round(mean_turn.gb_per_pflop, 2),
        },
        "paper_turn": {
            **{k: v for k, v in paper.to_dict().items() if k in ("context_tokens", "new_tokens", "hit_ratio")},
            "read_over_compute": round(paper_read / cost.prefill_s(PAPER_TURN.cached_tokens, PAPER_TURN.new_tokens), 3),
            "cache_compute_gb_per_pflop": round(paper.gb_per_pflop, 2),
        },
        "storage_bound_per_turn": later.read_over_compute > 1,
        # A saturated baseline's prefill storage NICs are busy this share: it loads, then computes.
        "baseline_prefill_snic_busy_saturated": round(read / (read + compute), 3),
        "agents_per_prefill_engine": agents / prefill,
        "ideal_offline_ratio": round((read + compute) / max(compute, read * prefill / (prefill + decode)), 3),
    }


def _turn(later: LaterTurns) -> TurnShape:
    cached, new = round(later.cached_tokens / later.turns), max(1, round(later.new_tokens / later.turns))
    return TurnShape(context_tokens=cached + new, new_tokens=new)


def path_a(sides: dict[str, dict[str, dict[str, Any] | None]]) -> dict[str, Any] | None:
    """Whether path A (the prefill side's storage NICs) bound the run, read from the first of
    `PATH_A_PROBES` that ran; None when neither did."""
    for name in PATH_A_PROBES:
        prefill = (sides.get(name) or {}).get("prefill")
        if prefill and prefill.get("busy_share_max") is not None:
            busy = prefill["busy_share_max"]
            return {"policy": name, "prefill_snic_busy_max": busy, "storage_bound": busy >= SATURATED}
    return None


def measured(sides: dict[str, dict[str, dict[str, Any] | None]]) -> dict[str, Any]:
    """Per policy, each side's storage-NIC busy shares and Gbps (`limits.storage_sides`), and
    whether path A bound the run (`path_a`)."""
    keep = ("busy_share_max", "busy_share_avg", "gbps_moved", "gbps_ceiling_measured")
    return {
        "storage_nics": {
            name: {role: None if side is None else {k: side[k] for k in keep} for role, side in by_role.items()}
            for name, by_role in sides.items()
        },
        "path_a": path_a(sides),
    }
