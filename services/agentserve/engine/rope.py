"""Rotary position embeddings, including the Llama-3 and linear frequency scaling variants.

Frequencies are computed in float64 on the CPU and cast once, so the cos/sin tables match
Hugging Face's to the last bit in fp32 (logit parity depends on it).
"""

from __future__ import annotations

import math

import torch

from agentserve.engine.config import ModelConfig


def inverse_frequencies(config: ModelConfig) -> torch.Tensor:
    dim = config.head_dim
    inv_freq = 1.0 / (config.rope_theta ** (torch.arange(0, dim, 2, dtype=torch.int64).float() / dim))
    scaling = config.rope_scaling or {}
    kind = scaling.get("rope_type", scaling.get("type", "default"))
    if kind == "linear":
        inv_freq = inv_freq / float(scaling["factor"])
    elif kind == "llama3":
        inv_freq = _llama3_scale(inv_freq, scaling)
    return inv_freq


def _llama3_scale(inv_freq: torch.Tensor, scaling: dict) -> torch.Tensor:
    # Llama 3.1: keep high frequencies, divide low ones by `factor`, blend smoothly in between.
    factor = float(scaling["factor"])
    low_freq_factor = float(scaling.get("low_freq_factor", 1.0))
    high_freq_factor = float(scaling.get("high_freq_factor", 4.0))
    old_context = float(scaling.get("original_max_position_embeddings", 8192))
    low_freq_wavelen = old_context / low_freq_factor
    high_freq_wavelen = old_context / high_freq_factor
    wavelen = 2 * math.pi / inv_freq
    scaled = torch.where(wavelen > low_freq_wavelen, inv_freq / factor, inv_freq)
    smooth = (old_context / wavelen - low_freq_factor) / (high_freq_factor - low_freq_factor)
    smoothed = (1 - smooth) * scaled / factor + smooth * scaled
    is_medium = ~(wavelen < high_freq_wavelen) * ~(wavelen > low_freq_wavelen)
    return torch.where(is_medium, smoothed, scaled)


class RotaryEmbedding(torch.nn.Module):
    """Applies RoPE to q and k given absolute positions (any order, any batch layout).

    cos/sin are looked up in tables covering every position seen so far rather than recomputed
    each forward: the table rows are the same fp32 products HF computes, so values match bit for
    bit. The tables grow (doubling) on demand instead of covering `max_position_embeddings` up
    front, which for a 128K-context model would cost far more memory than any request uses.
    """

    inv_freq: torch.Tensor
    _cos: torch.Tensor
    _signed_sin: torch.Tensor

    def __init__(self, config: ModelConfig):
        super().__init__()
        self.register_buffer("inv_freq", inverse_frequencies(config), persistent=False)
        self.register_buffer("_cos", torch.empty(0), persistent=False)
        self.register_buffer("_signed_sin", torch.empty(0), persistent=False)

    def cos_sin(
        self, positions: torch.Tensor | slice, num_positions: int, dtype: torch.dtype
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """cos and sign-folded sin for `rotate`, each `[tokens, 1, head_dim]`; positions < num_positions.

        A prefill's positions are a range: given as a slice, the tables are viewed, not gathered.
        """
        if num_positions > self._cos.shape[0]:
            self._grow(max(num_positions, 2 * self._cos.shape[0]))
        cos, sin = self._cos[positions], self._signed_sin[positions]
        return (cos, sin) if cos.dtype == dtype else (cos.to(dtype), sin.to(dtype))

    def _grow(self, num_positions: int) -> None:
        inv_freq = self.inv_freq.float()
        freqs = torch.arange(num_positions, device=inv_freq.device).float()[:, None] * inv_freq[None, :]
        cos, sin = freqs.cos(), freqs.sin()
        # rotate_half(x) * sin == [x2, x1] * [-sin, sin]: the sign is folded into the table.
        self._cos = torch.cat((cos, cos), dim=-1)[:, None, :]
        self._signed_sin = torch.cat((-sin, sin), dim=-1)[:, None, :]

    def shift(self, keys: torch.Tensor, offset: int) -> torch.Tensor:
        """Keys rotated at positions p, `[tokens, heads, head_dim]`, as if rotated at p + offset.

        RoPE rotates each pair of dimensions by position * frequency, and rotations compose:
        R(p + offset) = R(offset) R(p). So moving cached keys is one more rotation, exact up to
        float rounding, and values (never rotated) move unchanged. `offset` may be negative.
        """
        angles = float(offset) * self.inv_freq.double()  # float64: an fp32 product would lose bits at large offsets
        cos, sin = angles.cos(), angles.sin()
        cos_t = torch.cat((cos, cos)).to(keys.dtype)
        sin_t = torch.cat((-sin, sin)).to(keys.dtype)
        return self.rotate(keys, cos_t, sin_t)

    def shift_rows(self, keys: torch.Tensor, offsets: torch.Tensor) -> torch.Tensor:
        """`shift` with an offset per token: keys `[..., tokens, heads, head_dim]`, `offsets`
        `[tokens]`. The same arithmetic element by element, so the same bits as shifting each
        token alone, in one pass instead of one per run of tokens (a prompt holding N blocks)."""
        angles = offsets.double()[:, None] * self.inv_freq.double()[None, :]
        cos, sin = angles.cos(), angles.sin()
        cos_t = torch.cat((cos, cos), dim=-1).to(keys.dtype)[:, None, :]
        sin_t = torch.cat((-sin, sin), dim=-1).to(keys.dtype)[:, None, :]
        return self.rotate(keys, cos_t, sin_t)

    @staticmethod
    def rotate(x: torch.Tensor, cos: torch.Tensor, signed_sin: torch.Tensor) -> torch.Tensor:
        """x: [tokens, heads, head_dim]; cos/signed_sin: [tokens, 1, head_dim] from `cos_sin`."""
        half = x.shape[-1] // 2
        return x * cos + torch.cat((x[..., half:], x[..., :half]), dim=-1) * signed_sin
