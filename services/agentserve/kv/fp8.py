"""FP8 (e4m3) quantization of KV: one power-of-two float32 scale per token row, and float32 rows
quantized in a Walsh-Hadamard basis.

A row is one token's K (or V) of one layer, every KV head. Its scale is the smallest power of two
with amax / scale <= 448 (e4m3's largest finite value): half of bf16's bytes, a quarter of fp32's,
plus 4 bytes of scale per row.

**The Hadamard basis (float32 KV).** e4m3 keeps 3 mantissa bits, so each value is off by up to
1/16 of itself, whatever the scale. Keys have outlier channels that carry most of `q . k`, and the
error of those few channels adds up coherently in the attention logit. Each head's vector is
therefore quantized after a Walsh-Hadamard transform over groups of `HADAMARD_GROUP` channels
(FlashAttention-3's incoherent processing, QuaRot): an orthogonal change of basis that spreads an
outlier over every channel of its group, so the rounding errors are spread evenly and partly
cancel in `q . k`; the reader transforms back (the matrix is its own inverse up to 1/group).
The vector's relative error (L2) stays within 1/16.

The transform is exact where it must be: values on the e4m3 grid of a row with scale `s` are
integer multiples of `2**-9 * s` below `448 * s`, so the transform of a group of at most 64 of
them sums fewer than 2**24 such units at every butterfly stage (float32's integer range), and so
does the transform back. So `round_to_fp8` is idempotent in float32, as it is without the basis.
bf16 and fp16 hold 8 and 11 mantissa bits, too few for the transformed-back values, so their rows
are quantized in the channels as they are (a format reader knows which from the KV's dtype).

Why per row and a power of two: an engine writes KV a token at a time (decode appends into a
partly filled block), so a scale shared by a block would make a token's stored value depend on
tokens written after it, and a cached block could never equal a recompute of it. With a row's
scale from the row alone, a token's FP8 KV depends only on its own K/V. A power-of-two scale makes
`q * scale` exact in fp32 and bf16 and makes `round_to_fp8` idempotent (a value already on the grid
quantizes back to the same value, under the same or a smaller exponent): KV can go pool -> FP8
bytes -> pool any number of times without changing.
"""

from __future__ import annotations

import torch

FP8_DTYPE = torch.float8_e4m3fn
FP8_MAX = 448.0  # largest finite float8_e4m3fn value
ROW_DIMS = 2  # a row is [num_kv_heads, head_dim]: one token of one layer
HADAMARD_GROUP = 64  # channels per Walsh-Hadamard transform, at most: the exactness bound above


def in_hadamard_basis(dtype: torch.dtype) -> bool:
    """Whether KV of `dtype` is quantized in the Walsh-Hadamard basis (float32 only, see above)."""
    return dtype == torch.float32


def quantize_per_token(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Quantize `x` of shape [..., num_kv_heads, head_dim] to e4m3.

    Returns (q, scales): q has x's shape and dtype float8_e4m3fn; scales is float32 of shape
    x.shape[:-2], one power of two per token row, with x ~= `dequantize(q, scales, x.dtype)`.
    """
    xf = x.float()
    if in_hadamard_basis(x.dtype):
        xf = hadamard(xf)
    amax = xf.abs().amax(dim=(-2, -1))
    if not bool(torch.isfinite(amax).all()):
        raise ValueError("KV contains inf or NaN; it cannot be quantized to fp8")
    mantissa, exponent = torch.frexp(amax / FP8_MAX)  # amax / 448 = mantissa * 2**exponent, mantissa in [0.5, 1)
    exponent = exponent - (mantissa == 0.5).to(exponent.dtype)  # a power of two is its own ceiling
    # An all-zero row quantizes to zeros under scale 1.
    scales = torch.where(amax > 0, torch.exp2(exponent.to(torch.float32)), torch.ones_like(amax))
    q = (xf / _expand(scales, x.dim())).clamp_(-FP8_MAX, FP8_MAX).to(FP8_DTYPE)
    return q, scales


def dequantize(q: torch.Tensor, scales: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """Inverse of `quantize_per_token` for KV that was `dtype`, in `dtype`; `scales` covers q's
    leading dims and broadcasts over the rest."""
    x = q.float() * _expand(scales, q.dim())
    if in_hadamard_basis(dtype):
        x = hadamard(x).div_(hadamard_group(q.shape[-1]))
    return x.to(dtype)


def round_to_fp8(x: torch.Tensor) -> torch.Tensor:
    """`x` ([..., num_kv_heads, head_dim]) as its FP8 KV reads back, in x's dtype: what an engine
    with FP8 KV stores and attends over. Idempotent."""
    return dequantize(*quantize_per_token(x), x.dtype)


def hadamard_group(head_dim: int) -> int:
    """Channels per transform: the largest power of two dividing `head_dim`, at most `HADAMARD_GROUP`."""
    return min(head_dim & -head_dim, HADAMARD_GROUP)


def hadamard(x: torch.Tensor) -> torch.Tensor:
    """`x` (float32, [..., head_dim]) times the unnormalised Walsh-Hadamard matrix (entries +-1) of
    each group of `hadamard_group(head_dim)` consecutive channels. Butterflies of elementwise adds,
    so each row's result depends on that row alone. Applied twice it multiplies by the group size."""
    size = hadamard_group(x.shape[-1])
    y = x
    half = 1
    while half < size:  # stage: in each run of 2 * half channels, (a, b) -> (a + b, a - b)
        y = y.reshape(*x.shape[:-1], -1, 2, half)
        a, b = y.unbind(-2)
        y = torch.stack((a + b, a - b), dim=-2)
        half *= 2
    return y.reshape(x.shape)


def _expand(scales: torch.Tensor, ndim: int) -> torch.Tensor:
    return scales.reshape(*scales.shape, *([1] * (ndim - scales.dim())))
