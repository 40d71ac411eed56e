"""Paged attention on the CPU: write new KV into pool slots, read each sequence's context, attend.

Two metadata shapes cover the engine's two kinds of step:
- `PrefillMetadata`: one sequence, T new tokens on top of `num_cached` tokens already in the pool.
- `DecodeMetadata`: B sequences, one new token each, contexts of different lengths (padded, masked).

A prefill on a cached prefix attends to the prefix and to its own tokens separately and merges the
two by their log-sum-exps (`prefix_attention`): no `[T, context]` mask, and the new tokens' KV is
not read back from the pool.

`batch_invariant` (on in both, from `EngineConfig.batch_invariant`): a row's result does not depend
on the batch. Decode attends with `decode_attention` instead of SDPA, whose sums depend on the
batch, and every linear pads its rows (`linears.row_invariant_linear`).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch
import torch.nn.functional as F

from agentserve.engine.decode_attention import invariant_decode_attention, padded_context
from agentserve.engine.prefix_attention import attend_with_prefix


def token_rows(table: torch.Tensor, start: int, stop: int, block_size: int) -> torch.Tensor:
    """Flat pool rows of positions [start, stop), given the slot table (`[blocks]` or `[B, blocks]`)."""
    first = start // block_size
    every_row = torch.arange(block_size, device=table.device)
    rows = table[..., first:, None] * block_size + every_row  # every row of those blocks
    offset = start - first * block_size
    return rows.flatten(-2)[..., offset : offset + stop - start]


# The decode mask is additive (0 where a key is visible, -inf where not) and built once per step:
# given a bool mask, SDPA would convert it to this in every layer.


def additive_mask(visible: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    return torch.zeros(visible.shape, dtype=dtype, device=visible.device).masked_fill_(~visible, float("-inf"))


@dataclass
class PrefillMetadata:
    write_rows: torch.Tensor  # [T] pool rows for the new tokens' KV
    total: int  # num_cached + T
    num_cached: int
    block_size: int
    # The cached prefix's slots, in order. When they are consecutive (a prefix allocated in one
    # go from the free list usually is) its KV is a plain view of the pool, `prefix_start` its
    # first row; otherwise it is gathered block by block.
    prefix_slots: torch.Tensor
    prefix_start: int | None
    # Set per layer by a layerwise prefill whose prefix is not in the pool: that layer's prefix
    # KV, `[num_cached, heads, d]` each, read instead of the pool (`ModelRunner.prefill_staged`).
    staged_prefix: tuple[torch.Tensor, torch.Tensor] | None = None
    batch_invariant: bool = True

    @property
    def context_len(self) -> int:
        """Every position in this step is below this."""
        return self.total

    @classmethod
    def build(
        cls,
        slots: Sequence[int],
        block_size: int,
        num_cached: int,
        num_new: int,
        batch_invariant: bool = True,
        device: torch.device | None = None,
    ) -> PrefillMetadata:
        """`device`: the pool's, where the row indices are built (None: the CPU)."""
        total = num_cached + num_new
        table = torch.as_tensor(list(slots[: -(-total // block_size)]), dtype=torch.long, device=device)
        prefix = list(slots[: -(-num_cached // block_size)])
        consecutive = bool(prefix) and prefix == list(range(prefix[0], prefix[0] + len(prefix)))
        return cls(
            write_rows=token_rows(table, num_cached, total, block_size),
            total=total,
            num_cached=num_cached,
            block_size=block_size,
            prefix_slots=table[: len(prefix)],
            prefix_start=prefix[0] * block_size if consecutive else None,
            batch_invariant=batch_invariant,
        )

    def move_to(self, device: torch.device) -> None:
        """Put the step's row indices on `device` (the pool's), in place: a staging hook holds this
        object and sets `staged_prefix` on it per layer."""
        self.write_rows, self.prefix_slots = self.write_rows.to(device), self.prefix_slots.to(device)
        if self.staged_prefix is not None:
            self.staged_prefix = (self.staged_prefix[0].to(device), self.staged_prefix[1].to(device))

    def prefix_kv(self, rows: torch.Tensor) -> torch.Tensor:
        """One layer's KV of the cached prefix in position order, `[num_cached, heads, d]`."""
        if self.prefix_start is not None:
            return rows[self.prefix_start : self.prefix_start + self.num_cached]
        blocks = rows.view(-1, self.block_size, *rows.shape[1:]).index_select(0, self.prefix_slots)
        return blocks.view(-1, *rows.shape[1:])[: self.num_cached]


@dataclass
class DecodeMetadata:
    write_rows: torch.Tensor  # [B] pool row of each sequence's new token
    context_rows: torch.Tensor  # [B, max_len] pool rows, padding rows masked out
    key_mask: torch.Tensor  # [B, 1, 1, max_len] additive: 0 where the key is real, -inf on padding
    batch_invariant: bool = True  # max_len is then a whole number of `DECODE_SPLIT`s

    @property
    def context_len(self) -> int:
        """Every position in this step is below this."""
        return self.context_rows.shape[1]

    def move_to(self, device: torch.device) -> None:
        """Put the step's rows and mask on `device` (the pool's), in place."""
        self.write_rows, self.context_rows = self.write_rows.to(device), self.context_rows.to(device)
        self.key_mask = self.key_mask.to(device)

    @classmethod
    def build(
        cls,
        slot_tables: Sequence[Sequence[int]],
        block_size: int,
        lengths: Sequence[int],
        dtype: torch.dtype = torch.float32,
        batch_invariant: bool = True,
        device: torch.device | None = None,
    ) -> DecodeMetadata:
        """lengths[b] counts sequence b's tokens including the one being decoded; `device`: the
        pool's, where the rows and the mask are built (None: the CPU)."""
        max_len = padded_context(max(lengths)) if batch_invariant else max(lengths)
        num_blocks = -(-max_len // block_size)
        # One padded table for the batch (padding points at slot 0, masked), so the whole batch's
        # rows take a few tensor ops instead of a few per sequence.
        used = [list(t[:num_blocks]) for t in slot_tables]
        table = torch.as_tensor([u + [0] * (num_blocks - len(u)) for u in used], dtype=torch.long, device=device)
        rows = token_rows(table, 0, max_len, block_size)
        lengths_t = torch.as_tensor(lengths, device=device)
        visible = torch.arange(max_len, device=device)[None, :] < lengths_t[:, None]
        return cls(
            write_rows=rows[torch.arange(len(lengths), device=device), lengths_t - 1],
            context_rows=rows,
            key_mask=additive_mask(visible, dtype)[:, None, None, :],
            batch_invariant=batch_invariant,
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
    k_rows.index_copy_(0, meta.write_rows, k)  # the pool must have the model's dtype
    v_rows.index_copy_(0, meta.write_rows, v)
    if isinstance(meta, DecodeMetadata):
        if meta.batch_invariant:
            return invariant_decode_attention(q, k_rows, v_rows, meta.context_rows, meta.key_mask)
        keys = k_rows[meta.context_rows].transpose(1, 2)  # [B, KVH, S, d]
        values = v_rows[meta.context_rows].transpose(1, 2)
        out = F.scaled_dot_product_attention(
            q[:, :, None, :], keys, values, attn_mask=meta.key_mask, enable_gqa=groups > 1
        )
        return out[:, :, 0, :]
    if meta.num_cached:
        prefix_k, prefix_v = meta.staged_prefix or (meta.prefix_kv(k_rows), meta.prefix_kv(v_rows))
        return attend_with_prefix(q, k, v, prefix_k, prefix_v)
    # Nothing cached: the new tokens are the whole context, no need to read them back. CPU SDPA
    # only takes its fused (flash) kernel for 4-D inputs; 3-D falls back to the math path that
    # materialises the whole [T, T] score matrix.
    queries, keys, values = q.transpose(0, 1)[None], k.transpose(0, 1)[None], v.transpose(0, 1)[None]
    out = F.scaled_dot_product_attention(queries, keys, values, is_causal=True, enable_gqa=groups > 1)
    return out[0].transpose(0, 1)
