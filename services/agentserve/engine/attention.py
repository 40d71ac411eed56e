"""Paged attention on the CPU: write new KV into pool slots, gather each sequence's context, attend.

Two metadata shapes cover the engine's two kinds of step:
- `PrefillMetadata`: one sequence, T new tokens on top of `num_cached` tokens already in the pool.
- `DecodeMetadata`: B sequences, one new token each, contexts of different lengths (padded, masked).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch
import torch.nn.functional as F

# Queries per attention chunk when a cached prefix makes the mask non-square: bounds the
# [heads, chunk, context] score tensor for long contexts.
QUERY_CHUNK = 512


def slot_mapping(slots: Sequence[int], block_size: int, start: int, stop: int) -> torch.Tensor:
    """Flat pool row of each token position in [start, stop) of a sequence with these slots."""
    pos = torch.arange(start, stop)
    table = torch.as_tensor(list(slots), dtype=torch.long)
    return table[pos // block_size] * block_size + pos % block_size


@dataclass
class PrefillMetadata:
    write_rows: torch.Tensor  # [T] pool rows for the new tokens' KV
    context_rows: torch.Tensor  # [num_cached + T] pool rows of the whole context, in order
    num_cached: int

    @classmethod
    def build(cls, slots: Sequence[int], block_size: int, num_cached: int, num_new: int) -> "PrefillMetadata":
        total = num_cached + num_new
        return cls(
            write_rows=slot_mapping(slots, block_size, num_cached, total),
            context_rows=slot_mapping(slots, block_size, 0, total),
            num_cached=num_cached,
        )


@dataclass
class DecodeMetadata:
    write_rows: torch.Tensor  # [B] pool row of each sequence's new token
    context_rows: torch.Tensor  # [B, max_len] pool rows, padded with row 0
    key_mask: torch.Tensor  # [B, 1, 1, max_len] True where the key is real

    @classmethod
    def build(cls, slot_tables: Sequence[Sequence[int]], block_size: int, lengths: Sequence[int]) -> "DecodeMetadata":
        """lengths[b] counts sequence b's tokens including the one being decoded."""
        max_len = max(lengths)
        rows = torch.zeros(len(lengths), max_len, dtype=torch.long)
        mask = torch.zeros(len(lengths), max_len, dtype=torch.bool)
        for b, (slots, length) in enumerate(zip(slot_tables, lengths)):
            rows[b, :length] = slot_mapping(slots, block_size, 0, length)
            mask[b, :length] = True
        return cls(write_rows=rows[torch.arange(len(lengths)), torch.as_tensor(lengths) - 1],
                   context_rows=rows, key_mask=mask[:, None, None, :])


def _expand_kv(x: torch.Tensor, groups: int) -> torch.Tensor:
    # [..., kv_heads, S, d] -> [..., kv_heads * groups, S, d], matching HF's repeat_kv order.
    return x if groups == 1 else x.repeat_interleave(groups, dim=-3)


def paged_attention(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
    k_rows: torch.Tensor, v_rows: torch.Tensor,
    meta: PrefillMetadata | DecodeMetadata, groups: int,
) -> torch.Tensor:
    """q: [N, H, d]; k, v: [N, KVH, d] for the new tokens; k_rows/v_rows: a layer's flat pool.

    Returns [N, H, d].
    """
    k_rows[meta.write_rows] = k
    v_rows[meta.write_rows] = v
    if isinstance(meta, DecodeMetadata):
        keys = _expand_kv(k_rows[meta.context_rows].transpose(1, 2), groups)  # [B, H, S, d]
        values = _expand_kv(v_rows[meta.context_rows].transpose(1, 2), groups)
        out = F.scaled_dot_product_attention(q[:, :, None, :], keys, values, attn_mask=meta.key_mask)
        return out[:, :, 0, :]
    # CPU SDPA only takes its fused (flash) kernel for 4-D inputs; 3-D falls back to the math path
    # that materialises the whole [T, S] score matrix.
    keys = _expand_kv(k_rows[meta.context_rows].transpose(0, 1), groups)[None]  # [1, H, S, d]
    values = _expand_kv(v_rows[meta.context_rows].transpose(0, 1), groups)[None]
    queries = q.transpose(0, 1)[None]  # [1, H, T, d]
    if meta.num_cached == 0:
        return F.scaled_dot_product_attention(queries, keys, values, is_causal=True)[0].transpose(0, 1)
    outs = []
    total = keys.shape[2]
    key_pos = torch.arange(total)
    for start in range(0, queries.shape[2], QUERY_CHUNK):
        chunk = queries[:, :, start:start + QUERY_CHUNK]
        query_pos = torch.arange(start, start + chunk.shape[2]) + meta.num_cached
        mask = key_pos[None, :] <= query_pos[:, None]
        outs.append(F.scaled_dot_product_attention(chunk, keys, values, attn_mask=mask))
    return torch.cat(outs, dim=2)[0].transpose(0, 1)
