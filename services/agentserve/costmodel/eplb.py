"""EPLB: which experts to replicate and where to place the replicas, from recorded expert loads.

Hierarchical, as DeepSeek's expert-parallel load balancer is described (github.com/deepseek-ai/EPLB):

1. **Groups to nodes.** The router's expert groups (DeepSeek-V3 routes within groups, so a
   token's experts cluster in few groups) are packed onto nodes, an equal number per node,
   balancing the nodes' summed load: heaviest group first, each to the lightest node with room.
   Keeping a group on one node keeps its traffic off the inter-node network.
2. **Replicas within a node.** Each node has `slots / nodes` physical slots for its experts: every
   expert gets one, and each spare goes, one at a time, to the expert whose load per replica is
   then the highest. A replica serves an equal share of its expert's tokens (`rank_loads`).
3. **Replicas to GPUs.** The node's replicas are packed onto its GPUs, an equal number per GPU,
   balancing load the same way as step 1.

When the groups do not divide over the nodes, the whole cluster is treated as one node with one
group (the global policy). The plan is per layer and is re-made on a window of recent loads
(`bench/micro/eplb_replay.py`), since routing drifts with the workload.
"""

from __future__ import annotations

import heapq
from collections.abc import Sequence
from dataclasses import dataclass


@dataclass(frozen=True)
class ClusterLayout:
    ranks: int  # GPUs
    gpus_per_node: int
    slots_per_rank: int  # physical experts per GPU (routed experts / ranks, plus redundant ones)

    def __post_init__(self) -> None:
        if self.ranks <= 0 or self.gpus_per_node <= 0 or self.slots_per_rank <= 0:
            raise ValueError("ranks, gpus_per_node and slots_per_rank must be positive")
        if self.ranks % self.gpus_per_node:
            raise ValueError(f"ranks ({self.ranks}) must be a multiple of gpus_per_node ({self.gpus_per_node})")

    @property
    def nodes(self) -> int:
        return self.ranks // self.gpus_per_node

    @property
    def slots(self) -> int:
        return self.ranks * self.slots_per_rank


def balanced_packing(weights: Sequence[float], packs: int) -> list[int]:
    """The pack of each item: `len(weights) / packs` items per pack, heaviest item first into the
    lightest pack that still has room (ties to the lower pack index)."""
    if packs <= 0 or len(weights) % packs:
        raise ValueError(f"{len(weights)} items do not divide into {packs} packs")
    capacity = len(weights) // packs
    heap = [(0.0, pack) for pack in range(packs)]
    counts = [0] * packs
    assigned = [0] * len(weights)
    for item in sorted(range(len(weights)), key=lambda i: (-weights[i], i)):
        load, pack = heapq.heappop(heap)
        assigned[item] = pack
        counts[pack] += 1
        if counts[pack] < capacity:
            heapq.heappush(heap, (load + weights[item], pack))
    return assigned


def replicate(weights: Sequence[float], slots: int) -> list[int]:
    """Replicas per expert over `slots` (>= experts): one each, then each spare to the expert with
    the highest load per replica."""
    if slots < len(weights):
        raise ValueError(f"{slots} slots cannot hold {len(weights)} experts")
    counts = [1] * len(weights)
    heap = [(-w, e) for e, w in enumerate(weights)]
    heapq.heapify(heap)
    for _ in range(slots - len(weights)):
        _, expert = heapq.heappop(heap)
        counts[expert] += 1
        heapq.heappush(heap, (-weights[expert] / counts[expert], expert))
    return counts


def static_placement(experts: int, layout: ClusterLayout) -> list[int]:
    """No balancing: expert e on rank e // (experts / ranks), spare slots left to the first experts
    again (the layout without EPLB has no spare slots: slots == experts)."""
    return [slot % experts for slot in range(layout.slots)]


def plan_layer(weights: Sequence[float], groups: int, layout: ClusterLayout) -> list[int]:
    """The placement for one layer: `placement[slot]` = the logical expert served by physical slot
    `slot`, slots rank-major (rank r holds slots r * slots_per_rank ..)."""
    experts = len(weights)
    if experts % groups:
        raise ValueError(f"{experts} experts do not divide into {groups} groups")
    nodes = layout.nodes
    if groups % nodes or layout.slots % nodes:
        groups, nodes = 1, 1  # the global policy: one node, one group
    gpus_per_node = layout.ranks // nodes
    group_size = experts // groups
    group_weights = [sum(weights[g * group_size : (g + 1) * group_size]) for g in range(groups)]
    group_node = balanced_packing(group_weights, nodes)
    placement: list[int] = []
    for node in range(nodes):
        node_groups = [g for g in range(groups) if group_node[g] == node]
        members = [e for g in node_groups for e in range(g * group_size, (g + 1) * group_size)]
        counts = replicate([weights[e] for e in members], layout.slots // nodes)
        replicas = [(members[i], weights[members[i]] / n) for i, n in enumerate(counts) for _ in range(n)]
        gpu_of = balanced_packing([load for _, load in replicas], gpus_per_node)
        for gpu in range(gpus_per_node):
            placement.extend(expert for (expert, _), g in zip(replicas, gpu_of, strict=True) if g == gpu)
    return placement
