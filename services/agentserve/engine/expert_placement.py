"""ExpertPlacement: each expert's replicas over expert-parallel ranks, and how the router splits a
replicated expert's tokens over them.

A placement (an EPLB plan, `costmodel.eplb.plan_layer`) gives per sparse layer `slots[s]`, the
expert physical slot `s` serves, slots rank-major: rank r holds slots `r * slots_per_rank ..`.
An expert with n replicas has them on the ranks of its slots, in slot order.

The split (`ReplicaSplit.assign`) is round-robin in token order: within one forward the j-th copy
routed to expert e (copies in the order of the batch's tokens, then of a token's top-k) goes to
replica `j mod n`. It is deterministic, depends on nothing outside the forward, and gives each
replica the floor or ceiling of copies / n: the even split `costmodel.expert_parallel.rank_loads`
charges. The replicas hold the same weights, so the split changes which rank computes a copy and
never its value.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import torch

from agentserve.costmodel.eplb import ClusterLayout, plan_layer

PLACEMENT_FORMAT = "agentserve-expert-placement/1"


@dataclass(frozen=True)
class ExpertPlacement:
    ranks: int
    layers: tuple[int, ...]  # the model's sparse layer indices, in order
    slots: tuple[tuple[int, ...], ...]  # per sparse layer: the expert each physical slot serves

    def __post_init__(self) -> None:
        if self.ranks <= 0:
            raise ValueError(f"expert placement ranks must be positive, got {self.ranks}")
        if len(self.slots) != len(self.layers):
            raise ValueError(f"expert placement has {len(self.slots)} slot lists for {len(self.layers)} layers")
        for layer, slots in zip(self.layers, self.slots, strict=True):
            if not slots or len(slots) % self.ranks:
                raise ValueError(f"expert placement layer {layer}: {len(slots)} slots do not divide over {self.ranks}")

    @property
    def slots_per_rank(self) -> int:
        return len(self.slots[0]) // self.ranks

    def check(self, layers: Sequence[int], experts: int) -> None:
        """ValueError unless the placement fits a model with these sparse layers and experts, every
        expert with at least one replica."""
        if tuple(layers) != self.layers:
            raise ValueError(f"expert placement layers {list(self.layers)} are not the model's {list(layers)}")
        for layer, slots in zip(self.layers, self.slots, strict=True):
            if any(not 0 <= e < experts for e in slots):
                raise ValueError(f"expert placement layer {layer} names an expert outside 0..{experts - 1}")
            missing = sorted(set(range(experts)) - set(slots))
            if missing:
                raise ValueError(f"expert placement layer {layer} gives experts {missing[:5]} no replica")

    def replica_ranks(self, row: int) -> list[list[int]]:
        """Sparse layer `layers[row]`: each expert's replicas' ranks, in slot order."""
        experts = max(self.slots[row]) + 1
        ranks: list[list[int]] = [[] for _ in range(experts)]
        for slot, expert in enumerate(self.slots[row]):
            ranks[expert].append(slot // self.slots_per_rank)
        return ranks

    @classmethod
    def plan(
        cls,
        layers: Sequence[int],
        loads: Sequence[Sequence[float]],
        layout: ClusterLayout,
        groups: int = 1,
    ) -> ExpertPlacement:
        """EPLB's hierarchical plan (`costmodel.eplb.plan_layer`) of each layer from its loads."""
        slots = tuple(tuple(plan_layer(layer_loads, groups, layout)) for layer_loads in loads)
        return cls(layout.ranks, tuple(layers), slots)

    def to_json(self) -> dict[str, object]:
        return {
            "format": PLACEMENT_FORMAT,
            "ranks": self.ranks,
            "layers": list(self.layers),
            "slots": [list(s) for s in self.slots],
        }

    @classmethod
    def from_json(cls, doc: dict[str, object]) -> ExpertPlacement:
        if doc.get("format") != PLACEMENT_FORMAT:
            raise ValueError(f"expert placement format must be {PLACEMENT_FORMAT!r}, got {doc.get('format')!r}")
        try:
            ranks = int(doc["ranks"])  # type: ignore[call-overload]
            layers = tuple(int(x) for x in doc["layers"])  # type: ignore[attr-defined]
            slots = tuple(tuple(int(e) for e in s) for s in doc["slots"])  # type: ignore[attr-defined]
        except (KeyError, TypeError, ValueError) as e:
            raise ValueError(f"expert placement needs integer ranks, layers and slots: {e}") from None
        return cls(ranks, layers, slots)

    @classmethod
    def read(cls, path: str | Path) -> ExpertPlacement:
        try:
            doc = json.loads(Path(path).read_text(encoding="utf-8"))
        except (OSError, json.JSONDecodeError) as e:
            raise ValueError(f"expert placement {path}: {e}") from None
        return cls.from_json(doc)

    def write(self, path: str | Path) -> None:
        Path(path).write_text(json.dumps(self.to_json()) + "\n", encoding="utf-8")


class ReplicaSplit:
    """One sparse layer's replica table on the model's device, and the tokens each rank received."""

    def __init__(self, replica_ranks: list[list[int]], ranks: int, rank_counts: torch.Tensor):
        width = max(len(r) for r in replica_ranks)
        device = rank_counts.device
        self.ranks = ranks
        self.replicas = torch.tensor([len(r) for r in replica_ranks], dtype=torch.int64, device=device)
        self.table = torch.tensor(
            [r + [-1] * (width - len(r)) for r in replica_ranks], dtype=torch.int64, device=device
        )
        self.rank_counts = rank_counts  # this layer's row of `ExpertLoad.rank_counts`, added to in place

    def assign(self, chosen: torch.Tensor) -> torch.Tensor:
        """The rank computing each routed copy, shaped as `chosen` (`[tokens, top_k]` experts);
        the copies are counted into `rank_counts`."""
        flat = chosen.flatten()
        order = torch.argsort(flat, stable=True)
        per_expert = torch.bincount(flat, minlength=len(self.replicas))
        starts = torch.cumsum(per_expert, 0) - per_expert
        nth = torch.empty_like(flat)
        nth[order] = torch.arange(len(flat), device=flat.device) - starts[flat[order]]
        ranks = self.table[flat, nth % self.replicas[flat]]
        self.rank_counts.add_(torch.bincount(ranks, minlength=self.ranks))
        return ranks.view_as(chosen)
