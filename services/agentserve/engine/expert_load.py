"""ExpertLoad: how many tokens the router sent to each expert of each sparse layer.

One `[sparse layers, experts]` int64 tensor. Each sparse layer's `SparseMoe` adds its forward's
counts into its own row in place (a token counts once for each of its `top_k` experts), so the
count costs one `bincount` per layer and no Python per token. Tokens served from the prefix cache
are not routed again and so are not counted: the counts are the expert compute the engine did.

Given an expert placement (`place`, the engines' `--expert-placement PATH`: replicas of each expert
over expert-parallel ranks), each layer's router also splits a replicated expert's copies over its
replicas (`expert_placement.ReplicaSplit`) and `rank_counts` `[sparse layers, ranks]` counts the
copies each rank computed.

Readers (/metrics, `bench eplb`) take `snapshot()`s and subtract them; nothing resets the counts.
A `LoadRecorder` (the engines' `--record-expert-load PATH`) writes each forward's counts to a file.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import IO

import torch

from agentserve.engine.expert_placement import ExpertPlacement, ReplicaSplit
from agentserve.engine.moe_config import MoeConfig

RECORD_FORMAT = "agentserve-expert-load/1"


class LayerLoad:
    """One sparse layer's share: its row of the counts, and its replica split once placed."""

    def __init__(self, counts: torch.Tensor):
        self.counts = counts  # a view of `ExpertLoad.counts`, added to in place
        self.split: ReplicaSplit | None = None


class ExpertLoad:
    def __init__(self, moe: MoeConfig, device: torch.device | str = "cpu"):
        self.moe = moe
        self.layers = moe.sparse_layers
        self.counts = torch.zeros(len(self.layers), moe.num_experts, dtype=torch.int64, device=device)
        self._rows = {layer: LayerLoad(self.counts[i]) for i, layer in enumerate(self.layers)}
        self.placement: ExpertPlacement | None = None
        self.rank_counts: torch.Tensor | None = None  # [sparse layers, ranks] once placed
        self.recorder: LoadRecorder | None = None

    def layer(self, layer: int) -> LayerLoad:
        """Layer `layer`'s share, which its `SparseMoe` routes through."""
        return self._rows[layer]

    def place(self, placement: ExpertPlacement) -> None:
        """Split each replicated expert's copies over its replicas from now on (ValueError if the
        placement does not fit the model); `rank_counts` starts at zero."""
        placement.check(self.layers, self.moe.num_experts)
        self.placement = placement
        self.rank_counts = torch.zeros(len(self.layers), placement.ranks, dtype=torch.int64, device=self.counts.device)
        for i, layer in enumerate(self.layers):
            self._rows[layer].split = ReplicaSplit(placement.replica_ranks(i), placement.ranks, self.rank_counts[i])

    def snapshot(self) -> list[list[int]]:
        """The counts now, `[sparse layer][expert]`, in `layers` order."""
        return self.counts.tolist()

    def rank_snapshot(self) -> list[list[int]] | None:
        """Copies each rank computed, `[sparse layer][rank]`; None without a placement."""
        return None if self.rank_counts is None else self.rank_counts.tolist()

    def forward_done(self) -> None:
        """Called by the model after each forward: hands the forward's counts to the recorder."""
        if self.recorder is not None:
            self.recorder.record(self.counts, self.rank_counts)

    def record_to(self, path: str | Path) -> LoadRecorder:
        """Start recording each forward's counts to `path` (replaced); returns the recorder."""
        if self.recorder is not None:
            self.recorder.close()
        self.recorder = LoadRecorder(path, self)
        return self.recorder


class LoadRecorder:
    """JSON lines: a header (`format`, `layers`, `num_experts`, `top_k`), then one line per forward
    that routed any token: `{"forward": i, "counts": [[tokens per expert] per sparse layer]}`, with
    `"rank_counts": [[copies per rank] per sparse layer]` when the engine has a placement.

    A forward is one engine step (a prefill batch or a decode batch), so a replay can window the
    loads by steps as a serving engine's balancer would see them. Lines are flushed as written:
    the file is whole up to the last forward however the process ends.
    """

    def __init__(self, path: str | Path, load: ExpertLoad):
        self.path = Path(path)
        self._file: IO[str] | None = self.path.open("w", encoding="utf-8")
        self._last = load.counts.clone()
        self._last_ranks = None if load.rank_counts is None else load.rank_counts.clone()
        self._forwards = 0
        header = {
            "format": RECORD_FORMAT,
            "layers": list(load.layers),
            "num_experts": load.moe.num_experts,
            "top_k": load.moe.top_k,
        }
        self._write(header)

    def record(self, counts: torch.Tensor, rank_counts: torch.Tensor | None = None) -> None:
        delta = counts - self._last
        self._forwards += 1
        if not bool(delta.any()):
            return
        self._last = counts.clone()
        line: dict[str, object] = {"forward": self._forwards - 1, "counts": delta.tolist()}
        if rank_counts is not None:
            last = self._last_ranks if self._last_ranks is not None else torch.zeros_like(rank_counts)
            line["rank_counts"] = (rank_counts - last).tolist()
            self._last_ranks = rank_counts.clone()
        self._write(line)

    def _write(self, line: dict[str, object]) -> None:
        if self._file is None:
            raise ValueError(f"expert-load recording to {self.path} is closed")
        self._file.write(json.dumps(line, separators=(",", ":")) + "\n")
        self._file.flush()

    def close(self) -> None:
        if self._file is not None:
            self._file.close()
            self._file = None
