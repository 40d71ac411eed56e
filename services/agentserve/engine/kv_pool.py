"""KVPool: the engine's paged KV cache tensors.

Layout is layer-major, `[num_layers, num_slots, block_size, num_kv_heads, head_dim]`, the same order
as the block wire format, so exporting or importing a run of blocks for a layer range is one
indexed copy and no transpose.

A pool with `fp8` set holds FP8 KV (`EngineConfig.kv_dtype`): every row in it is what its e4m3
bytes read back (its own power-of-two scale; float32 rows transformed back from the Hadamard
basis, `kv.fp8.round_to_fp8`), held in the model's dtype because the CPU
attention kernels read that dtype. A layer rounds the rows it computes before it writes and
attends over them (`layer_plan.run_layer`); `write_blocks` and `stored` round what comes from
outside. Rounding is idempotent, so FP8 blocks exported from such a pool (the block format's
`fp8_e4m3`) come back bit for bit.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from agentserve.engine.config import ModelConfig
from agentserve.kv.fp8 import round_to_fp8


class KVPool:
    def __init__(
        self,
        config: ModelConfig,
        num_slots: int,
        block_size: int,
        dtype: torch.dtype,
        fp8: bool = False,
        device: torch.device | str = "cpu",
    ):
        if num_slots <= 0 or block_size <= 0:
            raise ValueError(f"KV pool needs positive num_slots and block_size, got {num_slots}, {block_size}")
        shape = (config.num_hidden_layers, num_slots, block_size, config.num_key_value_heads, config.head_dim)
        self.k = torch.zeros(shape, dtype=dtype, device=device)
        self.v = torch.zeros(shape, dtype=dtype, device=device)
        # The model's (attention writes and reads the pool in place), as the tensors report it:
        # `cuda` becomes the GPU it means, `cuda:0`.
        self.device = self.k.device
        self.num_layers = config.num_hidden_layers
        self.num_slots = num_slots
        self.block_size = block_size
        self.dtype = dtype
        self.fp8 = fp8
        # Every forward pass asks for each layer's views; made once, they cost it no tensor ops.
        rows = num_slots * block_size
        self._flat = [(self.k[i].view(rows, *shape[3:]), self.v[i].view(rows, *shape[3:])) for i in range(shape[0])]

    @classmethod
    def for_budget(
        cls,
        config: ModelConfig,
        budget_bytes: int,
        block_size: int,
        dtype: torch.dtype,
        fp8: bool = False,
        device: torch.device | str = "cpu",
    ) -> KVPool:
        per_slot = config.kv_bytes_per_token(dtype) * block_size
        num_slots = budget_bytes // per_slot
        if num_slots < 2:
            raise ValueError(f"KV budget {budget_bytes} B holds fewer than 2 blocks of {per_slot} B each")
        return cls(config, num_slots, block_size, dtype, fp8, device)

    @property
    def bytes_per_slot(self) -> int:
        return 2 * self.k[:, 0].numel() * self.k.element_size()

    def stored(self, kv: torch.Tensor) -> torch.Tensor:
        """`kv` (`[..., heads, head_dim]`) as this pool holds it: on its device, in its dtype, rounded to
        FP8 if `fp8`."""
        kv = kv.to(device=self.device, dtype=self.dtype)
        return round_to_fp8(kv) if self.fp8 else kv

    def flat(self, layer: int) -> tuple[torch.Tensor, torch.Tensor]:
        """Views of one layer as `[num_slots * block_size, heads, head_dim]` token rows."""
        return self._flat[layer]

    def read_blocks(self, slots: Sequence[int], layers: range | None = None) -> tuple[torch.Tensor, torch.Tensor]:
        """Copy of the given slots' KV, `[layers, len(slots), block_size, heads, head_dim]`."""
        layers = layers or range(self.num_layers)
        index = torch.as_tensor(list(slots), dtype=torch.long, device=self.device)
        sel = slice(layers.start, layers.stop)
        return self.k[sel].index_select(1, index), self.v[sel].index_select(1, index)

    def write_blocks(self, slots: Sequence[int], k: torch.Tensor, v: torch.Tensor, layers: range | None = None) -> None:
        layers = layers or range(self.num_layers)
        expected = (len(layers), len(slots), *self.k.shape[2:])
        if tuple(k.shape) != expected or tuple(v.shape) != expected:
            raise ValueError(f"KV blocks of shape {tuple(k.shape)} do not fit the pool; expected {expected}")
        index = torch.as_tensor(list(slots), dtype=torch.long, device=self.device)
        sel = slice(layers.start, layers.stop)
        self.k[sel].index_copy_(1, index, self.stored(k))
        self.v[sel].index_copy_(1, index, self.stored(v))
