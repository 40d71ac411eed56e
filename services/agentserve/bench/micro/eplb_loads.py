"""Expert loads for `bench eplb`: windows of `[layer][expert]` token copies on the target's layout.

Two sources:

- **recorded**: an engine's `--record-expert-load` file (`engine.expert_load.LoadRecorder`) from
  a small MoE. Its experts are mapped onto the target's: each of its `E` experts stands for
  `target_experts / E` target experts that split its load evenly, scattered by a seeded
  permutation per target layer (a model's experts bear no relation to GPU order); target layer
  `l` replays recorded layer `l % L`. Its forwards are cut into windows of `window_copies`
  routed token copies.
- **zipf**: each layer's expert popularity falls as 1 / rank^s over a random order of its experts,
  and between windows a tenth of the experts swap ranks (routing drifts with the workload); a
  window's loads are the expected copies of `copies_per_window` tokens' copies.
"""

from __future__ import annotations

import json
import random
from dataclasses import dataclass
from pathlib import Path

from agentserve.costmodel.eplb import ClusterLayout
from agentserve.engine.expert_load import RECORD_FORMAT
from agentserve.engine.expert_placement import ExpertPlacement

# [window][layer][expert] token copies
Windows = list[list[list[float]]]


@dataclass(frozen=True)
class Recording:
    layers: list[int]
    num_experts: int
    top_k: int
    forwards: list[list[list[int]]]  # [forward][sparse layer][expert]

    @classmethod
    def read(cls, path: str | Path) -> Recording:
        lines = Path(path).read_text(encoding="utf-8").splitlines()
        if not lines:
            raise ValueError(f"{path} is empty; record one with --record-expert-load")
        header = json.loads(lines[0])
        if header.get("format") != RECORD_FORMAT:
            raise ValueError(f"{path} is not an expert-load recording (format {header.get('format')!r})")
        forwards = [json.loads(line)["counts"] for line in lines[1:]]
        if not forwards:
            raise ValueError(f"{path} records no forward")
        return cls(header["layers"], header["num_experts"], header["top_k"], forwards)


def serve_placement(recording: Recording, ranks: int, redundant_per_rank: int) -> ExpertPlacement:
    """The recorded model's own EPLB placement over `ranks` (its engines' `--expert-placement`):
    each layer planned from the whole recording's loads, `experts / ranks + redundant_per_rank`
    slots per rank, all ranks one node (the global policy: the small model has no expert groups)."""
    if ranks <= 0 or recording.num_experts % ranks:
        raise ValueError(f"placement ranks must divide the {recording.num_experts} recorded experts, got {ranks}")
    layout = ClusterLayout(ranks, ranks, recording.num_experts // ranks + redundant_per_rank)
    loads = [
        [sum(column) for column in zip(*(f[layer] for f in recording.forwards))]
        for layer in range(len(recording.layers))
    ]
    return ExpertPlacement.plan(recording.layers, loads, layout)


def recorded_windows(
    recording: Recording, window_copies: int, target_experts: int, target_layers: int, seed: int = 0
) -> Windows:
    """Consecutive forwards grouped into windows of at least `window_copies` token copies (per
    layer), as a balancer re-planning every so many routed tokens sees them; a last, shorter
    window is dropped."""
    if window_copies <= 0:
        raise ValueError(f"window_copies must be positive, got {window_copies}")
    if target_experts % recording.num_experts:
        raise ValueError(f"{recording.num_experts} recorded experts do not divide {target_experts} target experts")
    split = target_experts // recording.num_experts
    rng = random.Random(seed)
    # stands_for[l][t]: the recorded expert that target expert t of target layer l stands for.
    stands_for = []
    for _ in range(target_layers):
        order = list(range(target_experts))
        rng.shuffle(order)
        stands_for.append([order[t] // split for t in range(target_experts)])
    out: Windows = []
    chunk: list[list[list[int]]] = []
    for forward in recording.forwards:
        chunk.append(forward)
        if sum(sum(f[0]) for f in chunk) < window_copies:
            continue
        sums = [[sum(column) for column in zip(*(f[layer] for f in chunk))] for layer in range(len(recording.layers))]
        out.append(
            [
                [sums[layer % len(sums)][stands_for[layer][t]] / split for t in range(target_experts)]
                for layer in range(target_layers)
            ]
        )
        chunk = []
    if len(out) < 2:
        raise ValueError(
            f"{len(recording.forwards)} recorded forwards make fewer than 2 windows of {window_copies} copies"
        )
    return out


def zipf_windows(
    experts: int, layers: int, windows: int, exponent: float, copies_per_window: float, seed: int = 0
) -> Windows:
    if exponent < 0 or windows < 2:
        raise ValueError("zipf exponent must be >= 0 and windows >= 2")
    rng = random.Random(seed)
    weights = [1 / (rank + 1) ** exponent for rank in range(experts)]
    total = sum(weights)
    orders = []
    for _ in range(layers):
        order = list(range(experts))
        rng.shuffle(order)
        orders.append(order)
    out: Windows = []
    for _ in range(windows):
        window = []
        for order in orders:
            loads = [0.0] * experts
            for rank, expert in enumerate(order):
                loads[expert] = copies_per_window * weights[rank] / total
            window.append(loads)
            for _ in range(experts // 20):  # a tenth of the experts swap ranks in pairs
                a, b = rng.randrange(experts), rng.randrange(experts)
                order[a], order[b] = order[b], order[a]
        out.append(window)
    return out
