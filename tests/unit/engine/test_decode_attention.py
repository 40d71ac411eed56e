"""Batch-invariant decode attention: a sequence's output is the same bits alone and in any batch,
padded to any length, at any thread count; and it is attention (matches a dense reference)."""

from __future__ import annotations

import math

import pytest
import torch

from agentserve.engine.decode_attention import DECODE_SPLIT, invariant_decode_attention, padded_context

pytestmark = pytest.mark.unit

KVH, HEADS, D = 2, 4, 64  # the default model's attention
POOL_ROWS = 8192


def batch(lengths: list[int], starts: list[int], context: int) -> tuple[torch.Tensor, torch.Tensor]:
    """(pool rows, additive mask) of sequences stored at consecutive rows from each start."""
    rows = torch.zeros(len(lengths), context, dtype=torch.long)
    mask = torch.full((len(lengths), context), float("-inf"))
    for b, (n, start) in enumerate(zip(lengths, starts)):
        rows[b, :n] = torch.arange(start, start + n)
        mask[b, :n] = 0
    return rows, mask


@pytest.fixture(scope="module")
def pool() -> tuple[torch.Tensor, torch.Tensor]:
    torch.manual_seed(0)
    return torch.randn(POOL_ROWS, KVH, D), torch.randn(POOL_ROWS, KVH, D)


@pytest.mark.parametrize("length", [1, 5, 64, 65, 300, 1000])
def test_a_sequence_attends_to_the_same_bits_alone_and_batched_with_others(pool, length: int) -> None:
    k_rows, v_rows = pool
    q = torch.randn(1, HEADS, D)
    rows, mask = batch([length], [100], padded_context(length))
    alone = invariant_decode_attention(q, k_rows, v_rows, rows, mask)
    for others in ([3], [2000], [17, 48, 700, 9, 33, 129, 1500]):
        lengths, starts = [length, *others], [100] + [3000 + 37 * i for i in range(len(others))]
        rows, mask = batch(lengths, starts, padded_context(max(lengths)) + DECODE_SPLIT)  # one split more: padding
        queries = torch.cat([q, torch.randn(len(others), HEADS, D)])
        assert torch.equal(invariant_decode_attention(queries, k_rows, v_rows, rows, mask)[:1], alone)


def test_the_output_does_not_depend_on_the_thread_count(pool) -> None:
    k_rows, v_rows = pool
    lengths = [700, 5, 130]
    rows, mask = batch(lengths, [0, 1000, 2000], padded_context(max(lengths)))
    q = torch.randn(len(lengths), HEADS, D)
    threads = torch.get_num_threads()
    try:
        outputs = []
        for n in (1, 2, 3):
            torch.set_num_threads(n)
            outputs.append(invariant_decode_attention(q, k_rows, v_rows, rows, mask))
    finally:
        torch.set_num_threads(threads)
    assert torch.equal(outputs[0], outputs[1]) and torch.equal(outputs[0], outputs[2])


def test_it_is_attention_over_each_sequences_own_keys(pool) -> None:
    k_rows, v_rows = pool
    lengths = [1, 77, 300]
    rows, mask = batch(lengths, [10, 500, 4000], padded_context(max(lengths)))
    q = torch.randn(len(lengths), HEADS, D)
    out = invariant_decode_attention(q, k_rows, v_rows, rows, mask)
    for b, n in enumerate(lengths):
        keys = k_rows[rows[b, :n]].repeat_interleave(HEADS // KVH, dim=1).transpose(0, 1)  # [H, n, d]
        values = v_rows[rows[b, :n]].repeat_interleave(HEADS // KVH, dim=1).transpose(0, 1)
        probs = (q[b, :, None] @ keys.transpose(1, 2) / math.sqrt(D)).softmax(-1)  # [H, 1, n]
        torch.testing.assert_close(out[b], (probs @ values)[:, 0], rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize(("kv_heads", "heads"), [(2, 4), (3, 9), (4, 4)])
def test_a_rows_output_is_the_same_bits_whatever_rows_share_its_sequence(kv_heads: int, heads: int) -> None:
    """A speculative verify reads a sequence's context once for its last token and its drafts (R
    query rows, each masked to its own position): each row equals that position decoded alone,
    also beside a sequence with fewer rows (padding rows) and for a lone query head per KV head."""
    gen = torch.Generator().manual_seed(kv_heads)
    k_rows = torch.randn(POOL_ROWS, kv_heads, D, generator=gen)
    v_rows = torch.randn(POOL_ROWS, kv_heads, D, generator=gen)
    lengths, starts, rows_per_seq = [120, 61], [0, 3000], 7
    q = torch.randn(2 * rows_per_seq, heads, D, generator=gen)
    context = padded_context(max(lengths) + rows_per_seq)
    rows = torch.stack([batch([n + rows_per_seq], [s], context)[0][0] for n, s in zip(lengths, starts)])
    visible = [[n + r for r in range(rows_per_seq)] for n in lengths]
    mask = torch.full((2, rows_per_seq, context), float("-inf"))
    for b, seen in enumerate(visible):
        for r, n in enumerate(seen):
            mask[b, r, :n] = 0
    together = invariant_decode_attention(q, k_rows, v_rows, rows, mask)
    for b in range(2):
        for r in range(rows_per_seq):
            alone_rows, alone_mask = batch([visible[b][r]], [starts[b]], padded_context(visible[b][r]))
            alone = invariant_decode_attention(q[b * rows_per_seq + r][None], k_rows, v_rows, alone_rows, alone_mask)
            assert torch.equal(together[b * rows_per_seq + r], alone[0])
