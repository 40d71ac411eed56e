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
    block_table: torch.Tensor  # [ceil(total / block_size)] slots of the whole context, in order
    block_size: int
    total: int  # num_cached + T
    num_cached: int
    # (first query, [chunk, total] causal mask) per query chunk; built once, shared by all layers.
    chunk_masks: list[tuple[int, torch.Tensor]]

    @classmethod
    def build(cls, slots: Sequence[int], block_size: int, num_cached: int, num_new: int) -> PrefillMetadata:
        total = num_cached + num_new
        masks = []
        if num_cached:
            key_pos = torch.arange(total)
            for start in range(0, num_new, QUERY_CHUNK):
                query_pos = torch.arange(start, min(start + QUERY_CHUNK, num_new)) + num_cached
                masks.append((start, key_pos[None, :] <= query_pos[:, None]))
        return cls(
            write_rows=slot_mapping(slots, block_size, num_cached, total),
            block_table=torch.as_tensor(list(slots[: -(-total // block_size)]), dtype=torch.long),
            block_size=block_size,
            total=total,
            num_cached=num_cached,
            chunk_masks=masks,
        )


@dataclass
class DecodeMetadata:
    write_rows: torch.Tensor  # [B] pool row of each sequence's new token
    context_rows: torch.Tensor  # [B, max_len] pool rows, padded with row 0
    key_mask: torch.Tensor  # [B, 1, 1, max_len] True where the key is real

    @classmethod
    def build(cls, slot_tables: Sequence[Sequence[int]], block_size: int, lengths: Sequence[int]) -> DecodeMetadata:
        """lengths[b] counts sequence b's tokens including the one being decoded."""
        max_len = max(lengths)
        rows = torch.zeros(len(lengths), max_len, dtype=torch.long)
        mask = torch.zeros(len(lengths), max_len, dtype=torch.bool)
        for b, (slots, length) in enumerate(zip(slot_tables, lengths)):
            rows[b, :length] = slot_mapping(slots, block_size, 0, length)
            mask[b, :length] = True
        return cls(
            write_rows=rows[torch.arange(len(lengths)), torch.as_tensor(lengths) - 1],
            context_rows=rows,
            key_mask=mask[:, None, None, :],
        )


def paged_attention(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    k_rows: torch.Tensor,
    v_rows: torch.Tensor,
    meta: PrefillMetadata | DecodeMetadata,
    groups: int,
) -> torch.Tensor:
    """q: [N, H, d]; k, v: [N, KVH, d] for the new tokens; k_rows/v_rows: a layer's flat pool.

    Returns [N, H, d].
    """
    k_rows[meta.write_rows] = k
    v_rows[meta.write_rows] = v
    if isinstance(meta, DecodeMetadata):
        keys = k_rows[meta.context_rows].transpose(1, 2)  # [B, KVH, S, d]
        values = v_rows[meta.context_rows].transpose(1, 2)
        out = F.scaled_dot_product_attention(
            q[:, :, None, :], keys, values, attn_mask=meta.key_mask, enable_gqa=groups > 1
        )
        return out[:, :, 0, :]
    # CPU SDPA only takes its fused (flash) kernel for 4-D inputs; 3-D falls back to the math path
    # that materialises the whole [T, S] score matrix.
    keys = _gather_blocks(k_rows, meta).transpose(0, 1)[None]  # [1, KVH, S, d]
    values = _gather_blocks(v_rows, meta).transpose(0, 1)[None]
    queries = q.transpose(0, 1)[None]  # [1, H, T, d]
    gqa = groups > 1
    if not meta.chunk_masks:
        out = F.scaled_dot_product_attention(queries, keys, values, is_causal=True, enable_gqa=gqa)
        return out[0].transpose(0, 1)
    outs = [
        F.scaled_dot_product_attention(
            queries[:, :, start : start + mask.shape[0]], keys, values, attn_mask=mask, enable_gqa=gqa
        )
        for start, mask in meta.chunk_masks
    ]
    return torch.cat(outs, dim=2)[0].transpose(0, 1)


def _gather_blocks(rows: torch.Tensor, meta: PrefillMetadata) -> torch.Tensor:
    """A layer's context KV in order, `[total, heads, d]`, gathered by block (not by token row)."""
    blocks = rows.view(-1, meta.block_size, *rows.shape[1:]).index_select(0, meta.block_table)
    return blocks.view(-1, *rows.shape[1:])[: meta.total]
