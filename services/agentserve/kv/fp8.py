"""FP8 (e4m3) quantization of KV with one power-of-two float32 scale per token row.

A row is one token's K (or V) of one layer, every KV head. Its scale is the smallest power of two
with amax / scale <= 448 (e4m3's largest finite value), and 3 mantissa bits bound the rounding
error of a normal value to 1/16 of its magnitude: half of bf16's bytes, a quarter of fp32's, plus
4 bytes of scale per row.

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


def quantize_per_token(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Quantize `x` of shape [..., num_kv_heads, head_dim] to e4m3.

    Returns (q, scales): q has x's shape and dtype float8_e4m3fn; scales is float32 of shape
    x.shape[:-2], one power of two per token row, with x ~= q * scale.
    """
    xf = x.float()
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
    """Inverse of `quantize_per_token`; `scales` covers q's leading dims and broadcasts over the rest."""
    return (q.float() * _expand(scales, q.dim())).to(dtype)


def round_to_fp8(x: torch.Tensor) -> torch.Tensor:
    """`x` ([..., num_kv_heads, head_dim]) as its FP8 KV reads back, in x's dtype: what an engine
    with FP8 KV stores and attends over. Idempotent."""
    return dequantize(*quantize_per_token(x), x.dtype)


def _expand(scales: torch.Tensor, ndim: int) -> torch.Tensor:
    return scales.reshape(*scales.shape, *([1] * (ndim - scales.dim())))
