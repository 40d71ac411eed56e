"""Attention of T new tokens over a cached prefix plus themselves, in two parts merged exactly.

Softmax attention over a union of disjoint key sets is the two parts' outputs weighted by their
softmax mass: with log-sum-exps `a` (prefix) and `b` (new keys), the prefix's share is
`exp(a) / (exp(a) + exp(b)) = sigmoid(a - b)`. Splitting buys, over one masked pass over the
whole context:

- every new token sees the whole prefix, so that part needs no `[T, context]` mask;
- the new tokens among themselves are a square causal block, the flash kernel's own `is_causal`;
- the new tokens' K/V are used as computed, not read back from the pool, and a prefix in
  consecutive slots is a view of the pool (`PrefillMetadata.prefix_kv`), so nothing is gathered
  (at 16K cached tokens, ~10% faster than gathering the context and masking).
"""

from __future__ import annotations

import torch

# The fused CPU kernel behind `F.scaled_dot_product_attention`, called directly because it also
# returns the log-sum-exp the merge needs (the public function drops it). It takes 4-D
# `[batch, heads, tokens, d]` inputs and fewer K/V heads than query heads (grouped-query attention).
_flash = torch.ops.aten._scaled_dot_product_flash_attention_for_cpu


def attend_with_prefix(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, prefix_k: torch.Tensor, prefix_v: torch.Tensor
) -> torch.Tensor:
    """q `[T, H, d]`; k, v `[T, KVH, d]` for the new tokens; prefix_k/v `[C, KVH, d]`. Returns `[T, H, d]`.

    New token i sees the whole prefix and new tokens 0..i.
    """
    queries = q.transpose(0, 1)[None]
    prefix_out, prefix_lse = _flash(queries, prefix_k.transpose(0, 1)[None], prefix_v.transpose(0, 1)[None])
    new_out, new_lse = _flash(queries, k.transpose(0, 1)[None], v.transpose(0, 1)[None], is_causal=True)
    prefix_share = torch.sigmoid(prefix_lse - new_lse)[..., None]  # float32 whatever q's dtype
    out = torch.lerp(new_out, prefix_out, prefix_share.to(q.dtype))
    return out[0].transpose(0, 1)
