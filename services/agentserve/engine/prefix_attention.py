"""Attention of T new tokens over a cached prefix plus themselves, in two parts merged exactly.

Softmax attention over a union of disjoint key sets is the two parts' outputs weighted by their
softmax mass: with log-sum-exps `a` (prefix) and `b` (new keys), the prefix's share is
`exp(a) / (exp(a) + exp(b)) = sigmoid(a - b)`. Splitting buys three things over one masked pass
over the whole context:

- every new token sees the whole prefix, so that part needs no mask at all, and a kv head's query
  heads can go in as one head of `groups * T` rows that reads the head's keys once (no K/V
  repeated per query head, better blocked than T-row heads when T is a few dozen);
- the new tokens among themselves are a square causal block, the flash kernel's own `is_causal`;
- the new tokens' K/V are used as computed, not read back from the pool, and a prefix in
  consecutive slots is a view of the pool (`PrefillMetadata.prefix_kv`), so nothing is gathered.
"""

from __future__ import annotations

import torch

# The fused CPU kernel behind `F.scaled_dot_product_attention`, called directly because it also
# returns the log-sum-exp the merge needs (the public function drops it). 4-D inputs only.
_flash = torch.ops.aten._scaled_dot_product_flash_attention_for_cpu


def attend_with_prefix(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, prefix_k: torch.Tensor, prefix_v: torch.Tensor
) -> torch.Tensor:
    """q `[T, H, d]`; k, v `[T, KVH, d]` for the new tokens; prefix_k/v `[C, KVH, d]`. Returns `[T, H, d]`.

    New token i sees the whole prefix and new tokens 0..i.
    """
    tokens, heads, dim = q.shape
    kv_heads = k.shape[1]
    groups = heads // kv_heads
    # Query head h reads kv head h // groups (HF's repeat_kv order), so a kv head's query heads
    # are consecutive and [H, T] regroups as [KVH, groups * T].
    grouped = q.transpose(0, 1).reshape(1, kv_heads, groups * tokens, dim)
    prefix_out, prefix_lse = _flash(grouped, prefix_k.transpose(0, 1)[None], prefix_v.transpose(0, 1)[None])
    new_k, new_v = k.transpose(0, 1)[None], v.transpose(0, 1)[None]
    if groups > 1:  # T rows per head: repeating them is cheap, unlike the prefix's
        new_k, new_v = new_k.repeat_interleave(groups, 1), new_v.repeat_interleave(groups, 1)
    new_out, new_lse = _flash(q.transpose(0, 1)[None], new_k, new_v, is_causal=True)
    # reshape, not view: the kernel lays the log-sum-exp out [batch, rows, heads].
    prefix_share = torch.sigmoid(prefix_lse.reshape(1, heads, tokens, 1) - new_lse[..., None]).to(q.dtype)
    out = torch.lerp(new_out, prefix_out.reshape(1, heads, tokens, dim), prefix_share)
    return out[0].transpose(0, 1)
