"""Moving RoPE keys to other positions without recomputing them.

A key rotated for position p becomes the key for position p + d by one more rotation by d (RoPE's
rotations compose), so a shared block's master serves a sibling at any position and the offset
costs no stored bytes. The diff writer predicts a sibling's rows with this shift and the receiver
restores them with it, so a row is stored only where the sibling really differs from its shifted
master; for that the engine must shift its reused keys with the same arithmetic, which this is:
the engine's `RotaryEmbedding.shift` (float64 angles from the model's float32 inverse
frequencies, cos/sin cast to the keys' dtype, the rotation done in that dtype).
"""

from __future__ import annotations

import torch

_CACHED_OFFSETS = 64


class RopeShift:
    """Re-rotates keys `[..., num_kv_heads, head_dim]` (half-split "rotate_half" RoPE, as Llama and
    Qwen use) by a position offset, given the model's inverse frequencies (`head_dim // 2` of them,
    `engine.rope.inverse_frequencies`: scaled variants included)."""

    def __init__(self, inv_freq: torch.Tensor) -> None:
        if inv_freq.dim() != 1 or inv_freq.numel() == 0:
            raise ValueError(f"inv_freq must be a non-empty 1-D tensor, got shape {tuple(inv_freq.shape)}")
        self.inv_freq = inv_freq.detach().cpu().double()
        self._cache: dict[tuple[int, torch.dtype], tuple[torch.Tensor, torch.Tensor]] = {}

    @classmethod
    def for_theta(cls, rope_theta: float, head_dim: int) -> RopeShift:
        """Plain RoPE (no frequency scaling) with base `rope_theta`, frequencies as the engine computes them."""
        if head_dim <= 0 or head_dim % 2:
            raise ValueError(f"head_dim must be a positive even number, got {head_dim}")
        return cls(1.0 / (rope_theta ** (torch.arange(0, head_dim, 2, dtype=torch.int64).float() / head_dim)))

    @property
    def head_dim(self) -> int:
        return 2 * self.inv_freq.numel()

    def shift(self, keys: torch.Tensor, offset: int) -> torch.Tensor:
        """`keys` rotated by `offset` positions (may be negative), in their own dtype, as a new tensor."""
        if keys.shape[-1] != self.head_dim:
            raise ValueError(f"keys have head_dim {keys.shape[-1]}, this shift rotates {self.head_dim}")
        cos, signed_sin = self._tables(offset, keys.dtype)
        half = keys.shape[-1] // 2
        return keys * cos + torch.cat((keys[..., half:], keys[..., :half]), dim=-1) * signed_sin

    def _tables(self, offset: int, dtype: torch.dtype) -> tuple[torch.Tensor, torch.Tensor]:
        """cos and sign-folded sin of `offset`, in `dtype`; a restore asks once per layer, so the
        last offsets' tables are kept."""
        key = (offset, dtype)
        tables = self._cache.get(key)
        if tables is None:
            angles = float(offset) * self.inv_freq  # float64: an fp32 product would lose bits at large offsets
            cos, sin = angles.cos(), angles.sin()
            tables = (torch.cat((cos, cos)).to(dtype), torch.cat((-sin, sin)).to(dtype))
            if len(self._cache) >= _CACHED_OFFSETS:
                self._cache.pop(next(iter(self._cache)))
            self._cache[key] = tables
        return tables
