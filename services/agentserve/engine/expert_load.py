"""ExpertLoad: how many tokens the router sent to each expert of each sparse layer.

One `[sparse layers, experts]` int64 tensor. Each sparse layer's `SparseMoe` adds its forward's
counts into its own row in place (a token counts once for each of its `top_k` experts), so the
count costs one `bincount` per layer and no Python per token. Tokens served from the prefix cache
are not routed again and so are not counted: the counts are the expert compute the engine did.

Readers (/metrics, `bench eplb`) take `snapshot()`s and subtract them; nothing resets the counts.
A `LoadRecorder` (the engines' `--record-expert-load PATH`) writes each forward's counts to a file.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import IO

import torch

from agentserve.engine.moe_config import MoeConfig

RECORD_FORMAT = "agentserve-expert-load/1"


class ExpertLoad:
    def __init__(self, moe: MoeConfig, device: torch.device | str = "cpu"):
        self.moe = moe
        self.layers = moe.sparse_layers
        self.counts = torch.zeros(len(self.layers), moe.num_experts, dtype=torch.int64, device=device)
        self._row = {layer: i for i, layer in enumerate(self.layers)}
        self.recorder: LoadRecorder | None = None

    def row(self, layer: int) -> torch.Tensor:
        """Layer `layer`'s counts, a view its `SparseMoe` adds into."""
        return self.counts[self._row[layer]]

    def snapshot(self) -> list[list[int]]:
        """The counts now, `[sparse layer][expert]`, in `layers` order."""
        return self.counts.tolist()

    def forward_done(self) -> None:
        """Called by the model after each forward: hands the forward's counts to the recorder."""
        if self.recorder is not None:
            self.recorder.record(self.counts)

    def record_to(self, path: str | Path) -> LoadRecorder:
        """Start recording each forward's counts to `path` (replaced); returns the recorder."""
        if self.recorder is not None:
            self.recorder.close()
        self.recorder = LoadRecorder(path, self)
        return self.recorder


class LoadRecorder:
    """JSON lines: a header (`format`, `layers`, `num_experts`, `top_k`), then one line per forward
    that routed any token: `{"forward": i, "counts": [[tokens per expert] per sparse layer]}`.

    A forward is one engine step (a prefill batch or a decode batch), so a replay can window the
    loads by steps as a serving engine's balancer would see them. Lines are flushed as written:
    the file is whole up to the last forward however the process ends.
    """

    def __init__(self, path: str | Path, load: ExpertLoad):
        self.path = Path(path)
        self._file: IO[str] | None = self.path.open("w", encoding="utf-8")
        self._last = load.counts.clone()
        self._forwards = 0
        header = {
            "format": RECORD_FORMAT,
            "layers": list(load.layers),
            "num_experts": load.moe.num_experts,
            "top_k": load.moe.top_k,
        }
        self._write(header)

    def record(self, counts: torch.Tensor) -> None:
        delta = counts - self._last
        self._forwards += 1
        if not bool(delta.any()):
            return
        self._last = counts.clone()
        self._write({"forward": self._forwards - 1, "counts": delta.tolist()})

    def _write(self, line: dict[str, object]) -> None:
        if self._file is None:
            raise ValueError(f"expert-load recording to {self.path} is closed")
        self._file.write(json.dumps(line, separators=(",", ":")) + "\n")
        self._file.flush()

    def close(self) -> None:
        if self._file is not None:
            self._file.close()
            self._file = None
