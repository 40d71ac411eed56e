"""Batch-invariant decode attention: a sequence's output does not depend on what it is batched with.

`F.scaled_dot_product_attention` is not batch invariant on the CPU: its decode kernel divides each
sequence's keys among the threads by how many (sequence, head) pairs the batch has, so the same
query over the same keys sums in another order when another sequence joins the step, and also
when padding lengthens its row. The low bits differ (~1e-7 after one layer, ~1e-5 in the logits),
enough to flip a near-tie argmax: greedy tokens of concurrent turns then differ from a full
recompute.

Here every reduction has a fixed shape and order, whatever the batch, padding or thread count:

- keys are cut in splits of `DECODE_SPLIT` positions, counted from position 0 of each sequence,
  so a sequence's splits hold the same keys alone or in any batch (padding only adds whole
  splits, fully masked, after its last);
- each split's `q . k`, `p @ v` and `sum(p)` is one entry of a batched matmul of a fixed shape
  (`[SPLIT, d] @ [d, groups]`, `[groups, SPLIT] @ [SPLIT, d]`); the entries' operands are
  materialised, never broadcast (a stride-0 operand lets MKL fold the batch into one larger
  product, which blocks the sum differently);
- the softmax max is over the whole row (exact whatever the order), and the splits are summed
  one after another by `cumsum`, so fully masked trailing splits add exact zeros.

The cost over SDPA is a few small copies and the padding to a whole split.
"""

from __future__ import annotations

import torch

# Key positions per split. 64 keeps the masked tail of a short sequence small and each matmul
# entry large enough for MKL (below ~400 multiply-adds bmm takes a naive loop).
DECODE_SPLIT = 64


def padded_context(max_len: int) -> int:
    """The context length a decode batch is padded to: whole splits."""
    return -(-max_len // DECODE_SPLIT) * DECODE_SPLIT


def invariant_decode_attention(
    q: torch.Tensor,
    k_rows: torch.Tensor,
    v_rows: torch.Tensor,
    context_rows: torch.Tensor,
    key_mask: torch.Tensor,
) -> torch.Tensor:
    """q `[B * R, H, d]`: R query rows for each of B sequences, sequence-major (a plain decode has
    R = 1; a speculative verify has a sequence's last token and its drafts); k_rows/v_rows a layer's
    flat pool `[rows, KVH, d]`; context_rows `[B, S]` pool rows with S a multiple of `DECODE_SPLIT`;
    key_mask additive, `B * R * S` values, each query row's own. Returns `[B * R, H, d]`.

    A sequence's keys and values are gathered once for all its query rows, which are columns of the
    same products (R x the query heads of a KV head): a product's column depends only on that
    column of its operand, and MKL sums a column in one order whatever the column count, except
    that `p @ v` over a single column takes another kernel, so a lone column gets a zero column
    beside it. A row's output is thus the same bits whatever R (tests/unit/engine/test_decode_attention.py).
    """
    batch, (total, heads, d) = context_rows.shape[0], q.shape
    rows, kv_heads, context = total // batch, k_rows.shape[1], context_rows.shape[1]
    groups, splits = heads // kv_heads, context // DECODE_SPLIT
    cols = rows * groups
    if cols == 1:
        twin = torch.stack([q, torch.zeros_like(q)], 1).flatten(0, 1)
        mask = key_mask.reshape(batch, 1, context).expand(batch, 2, context)
        return invariant_decode_attention(twin, k_rows, v_rows, context_rows, mask)[::2]
    # Gathered head-major, so the (kv head, sequence, split) batch of each matmul is one flat dim.
    # float32 whatever the pool's dtype: MKL's fp32 products are the ones shown row-invariant.
    keys = k_rows.transpose(0, 1)[:, context_rows].float().view(kv_heads, batch, splits, DECODE_SPLIT, d)
    values = v_rows.transpose(0, 1)[:, context_rows].float().view(kv_heads, batch, splits, DECODE_SPLIT, d)
    # Query head h reads kv head h // groups (Hugging Face's repeat_kv order); columns (row, group).
    queries = (q.float() * d**-0.5).view(batch, rows, kv_heads, groups, d).permute(2, 0, 4, 1, 3)
    queries = queries.reshape(kv_heads, batch, d, cols)[:, :, None].expand(kv_heads, batch, splits, d, cols)
    scores = torch.matmul(keys, queries.contiguous())  # [KVH, B, splits, SPLIT, cols]
    visible = key_mask.reshape(batch, rows, splits, DECODE_SPLIT).permute(0, 2, 3, 1)
    scores.view(kv_heads, batch, splits, DECODE_SPLIT, rows, groups).add_(visible[None, ..., None])
    top = scores.amax(dim=(2, 3), keepdim=True)
    probs = torch.exp_(scores.sub_(top)).transpose(-1, -2).contiguous()  # [KVH, B, splits, cols, SPLIT]
    ones = probs.new_ones(kv_heads, batch, splits, DECODE_SPLIT, 1)
    weighted = torch.matmul(probs, values).cumsum(2)[:, :, -1]  # [KVH, B, cols, d]
    mass = torch.matmul(probs, ones).cumsum(2)[:, :, -1]
    out = (weighted / mass).view(kv_heads, batch, rows, groups, d).permute(1, 2, 0, 3, 4)
    return out.reshape(total, heads, d).to(q.dtype)
