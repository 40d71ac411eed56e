"""Paged attention on the CPU: write new KV into pool slots, read each sequence's context, attend.

Two metadata shapes cover the engine's two kinds of step:
- `PrefillMetadata`: one sequence, T new tokens on top of `num_cached` tokens already in the pool.
- `DecodeMetadata`: B sequences, one new token each (a speculative verify: a few each, one
  context read per sequence), contexts of different lengths (padded, masked).

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
    """B sequences, each with R query rows: R = 1 in a plain decode; in a speculative verify, a
    sequence's last token and its drafts, padded to the batch's most rows (`query_rows` then maps
    the step's tokens to their places). Each sequence's context is read once for all its rows."""

    write_rows: torch.Tensor  # [N] pool row of each new token
    context_rows: torch.Tensor  # [B, max_len] pool rows, padding rows masked out
    key_mask: torch.Tensor  # [B, 1, R, max_len] additive: 0 where the row sees the key, -inf elsewhere
    batch_invariant: bool = True  # max_len is then a whole number of `DECODE_SPLIT`s
    # [N]: each new token's place among the B * R query rows; None when R = 1 (token b is row b).
    query_rows: torch.Tensor | None = None

    @property
    def context_len(self) -> int:
        """Every position in this step is below this."""
        return self.context_rows.shape[1]

    def move_to(self, device: torch.device) -> None:
        """Put the step's rows and mask on `device` (the pool's), in place."""
        self.write_rows, self.context_rows = self.write_rows.to(device), self.context_rows.to(device)
        self.key_mask = self.key_mask.to(device)
        if self.query_rows is not None:
            self.query_rows = self.query_rows.to(device)

    @classmethod
    def build(
        cls,
        slot_tables: Sequence[Sequence[int]],
        block_size: int,
        lengths: Sequence[int],
        dtype: torch.dtype = torch.float32,
        batch_invariant: bool = True,
        device: torch.device | None = None,
        new_tokens: Sequence[int] | None = None,
    ) -> DecodeMetadata:
        """lengths[b] counts sequence b's tokens including the first one being decoded, and
        `new_tokens[b]` (default 1) tokens are decoded at positions lengths[b] - 1 onwards, each
        seeing the ones before it; `device`: the pool's, where the rows and the mask are built
        (None: the CPU)."""
        new = list(new_tokens) if new_tokens is not None else [1] * len(lengths)
        rows_per_seq = max(new)
        max_len = max(n + r - 1 for n, r in zip(lengths, new))
        max_len = padded_context(max_len) if batch_invariant else max_len
        num_blocks = -(-max_len // block_size)
        # One padded table for the batch (padding points at slot 0, masked), so the whole batch's
        # rows take a few tensor ops instead of a few per sequence.
        used = [list(t[:num_blocks]) for t in slot_tables]
        table = torch.as_tensor([u + [0] * (num_blocks - len(u)) for u in used], dtype=torch.long, device=device)
        rows = token_rows(table, 0, max_len, block_size)
        # Row r of sequence b sees positions < lengths[b] + r; a padding row (r >= new[b]) sees what
        # row 0 does, so no row is wholly masked.
        seen = [[n + (r if r < k else 0) for r in range(rows_per_seq)] for n, k in zip(lengths, new)]
        seen_t = torch.as_tensor(seen, device=device)  # [B, R]
        visible = torch.arange(max_len, device=device) < seen_t[..., None]
        seq_of = torch.as_tensor([b for b, k in enumerate(new) for _ in range(k)], dtype=torch.long, device=device)
        offset = torch.as_tensor([r for k in new for r in range(k)], dtype=torch.long, device=device)
        lengths_t = torch.as_tensor(lengths, dtype=torch.long, device=device)
        return cls(
            write_rows=rows[seq_of, lengths_t[seq_of] - 1 + offset],
            context_rows=rows,
            key_mask=additive_mask(visible, dtype)[:, None],
            batch_invariant=batch_invariant,
            query_rows=None if rows_per_seq == 1 else seq_of * rows_per_seq + offset,
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
        return _decode_attention(q, k_rows, v_rows, meta, groups)
    if meta.num_cached:
        prefix_k, prefix_v = meta.staged_prefix or (meta.prefix_kv(k_rows), meta.prefix_kv(v_rows))
        return attend_with_prefix(q, k, v, prefix_k, prefix_v)
    # Nothing cached: the new tokens are the whole context, no need to read them back. CPU SDPA
    # only takes its fused (flash) kernel for 4-D inputs; 3-D falls back to the math path that
    # materialises the whole [T, T] score matrix.
    queries, keys, values = q.transpose(0, 1)[None], k.transpose(0, 1)[None], v.transpose(0, 1)[None]
    out = F.scaled_dot_product_attention(queries, keys, values, is_causal=True, enable_gqa=groups > 1)
    return out[0].transpose(0, 1)


def _decode_attention(
    q: torch.Tensor, k_rows: torch.Tensor, v_rows: torch.Tensor, meta: DecodeMetadata, groups: int
) -> torch.Tensor:
    """q `[N, H, d]`, the step's new tokens; each sequence's context read once for all its rows."""
    batch, rows = meta.context_rows.shape[0], meta.key_mask.shape[2]
    if meta.query_rows is not None:  # the tokens into their places among the B * R query rows
        q = q.new_zeros(batch * rows, *q.shape[1:]).index_copy_(0, meta.query_rows, q)
    if meta.batch_invariant:
        out = invariant_decode_attention(q, k_rows, v_rows, meta.context_rows, meta.key_mask)
    else:
        keys = k_rows[meta.context_rows].transpose(1, 2)  # [B, KVH, S, d]
        values = v_rows[meta.context_rows].transpose(1, 2)
        queries = q.view(batch, rows, *q.shape[1:]).transpose(1, 2)  # [B, H, R, d]
        out = F.scaled_dot_product_attention(queries, keys, values, attn_mask=meta.key_mask, enable_gqa=groups > 1)
        out = out.transpose(1, 2).flatten(0, 1)
    return out if meta.query_rows is None else out.index_select(0, meta.query_rows)
