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

That kernel is the CPU's. On another device (CUDA) the prefill is one masked SDPA call over the
prefix and the new keys together (`attend_masked`), for which torch picks its own fused kernel.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

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
    if q.device.type != "cpu":
        return attend_masked(q, k, v, prefix_k, prefix_v)
    queries = q.transpose(0, 1)[None]
    prefix_out, prefix_lse = _flash(queries, prefix_k.transpose(0, 1)[None], prefix_v.transpose(0, 1)[None])
    new_out, new_lse = _flash(queries, k.transpose(0, 1)[None], v.transpose(0, 1)[None], is_causal=True)
    prefix_share = torch.sigmoid(prefix_lse - new_lse)[..., None]  # float32 whatever q's dtype
    out = torch.lerp(new_out, prefix_out, prefix_share.to(q.dtype))
    return out[0].transpose(0, 1)


def attend_masked(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, prefix_k: torch.Tensor, prefix_v: torch.Tensor
) -> torch.Tensor:
    """`attend_with_prefix` as one SDPA call over the concatenated context with a `[T, C + T]` mask
    (new token i sees keys up to C + i). K/V heads are repeated to the query heads (Hugging Face's
    `repeat_kv` order) so any fused kernel that takes a mask is eligible, not only the GQA-aware ones."""
    cached, num_new, groups = prefix_k.shape[0], k.shape[0], q.shape[1] // k.shape[1]
    keys = torch.cat([prefix_k, k]).transpose(0, 1).repeat_interleave(groups, dim=0)[None]
    values = torch.cat([prefix_v, v]).transpose(0, 1).repeat_interleave(groups, dim=0)[None]
    visible = torch.ones((num_new, cached + num_new), dtype=torch.bool, device=q.device).tril_(cached)
    out = F.scaled_dot_product_attention(q.transpose(0, 1)[None], keys, values, attn_mask=visible)
    return out[0].transpose(0, 1)
