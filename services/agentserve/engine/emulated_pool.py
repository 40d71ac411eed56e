"""The emulated engine's KV: a pool of the target GPU's size that stores nothing, and the stand-in
block geometry its exported blocks have.

Blocks leave an emulated engine as real block-format buffers (so the store verifies them and the
fabric streams them as in real mode) of the geometry `layers x block_size x 1 head x head_dim`,
fp16, with `layers` the target's: a layerwise load reads layer l of them as it would the target's.
`head_dim` is chosen so a block's payload is the target's bytes (`kv_materialise_bytes = 0`: 4 bytes
per token-layer per head_dim unit, K and V in fp16), or at most `kv_materialise_bytes` (at least 1);
each section is 64-byte aligned, so a tiny payload is 128 bytes per layer. Every block is charged
the target's `kv_bytes_per_token * block_size` on the NICs (`byte_weight`), whatever its size here.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch

from agentserve.costmodel.models import TargetModel

STANDIN_DTYPE = torch.float16
_BYTES_PER_HEAD_DIM = 2 * STANDIN_DTYPE.itemsize  # one token, one layer: K and V


@dataclass(frozen=True)
class StandinGeometry:
    layers: int
    block_size: int
    head_dim: int  # one KV head
    declared_block_bytes: int  # the target's KV bytes for one block: what the NICs charge

    @classmethod
    def for_target(cls, model: TargetModel, block_size: int, materialise_bytes: int) -> StandinGeometry:
        full = max(1, round(model.kv_bytes_per_token_per_layer / _BYTES_PER_HEAD_DIM))
        head_dim = full
        if materialise_bytes:
            head_dim = max(1, min(full, materialise_bytes // (model.layers * block_size * _BYTES_PER_HEAD_DIM)))
        return cls(model.layers, block_size, head_dim, model.kv_bytes_per_token * block_size)


class EmulatedKVPool:
    """`KVPool`'s interface over `num_slots` slots that hold no bytes: reads give zeros of the
    stand-in geometry, writes check the shape and drop the data (the runner never reads KV)."""

    def __init__(self, geometry: StandinGeometry, num_slots: int):
        if num_slots <= 0:
            raise ValueError(f"KV pool needs positive num_slots, got {num_slots}")
        self.geometry = geometry
        self.num_layers = geometry.layers
        self.num_slots = num_slots
        self.block_size = geometry.block_size
        self.dtype = STANDIN_DTYPE
        self._block_shape = (geometry.block_size, 1, geometry.head_dim)

    @property
    def bytes_per_slot(self) -> int:
        return self.geometry.declared_block_bytes

    def read_blocks(self, slots: Sequence[int], layers: range | None = None) -> tuple[torch.Tensor, torch.Tensor]:
        layers = layers or range(self.num_layers)
        zeros = torch.zeros((len(layers), len(slots), *self._block_shape), dtype=self.dtype)
        return zeros, zeros

    def write_blocks(self, slots: Sequence[int], k: torch.Tensor, v: torch.Tensor, layers: range | None = None) -> None:
        layers = layers or range(self.num_layers)
        expected = (len(layers), len(slots), *self._block_shape)
        if tuple(k.shape) != expected or tuple(v.shape) != expected:
            raise ValueError(f"KV blocks of shape {tuple(k.shape)} do not fit the pool; expected {expected}")
