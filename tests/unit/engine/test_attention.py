"""Paged attention against a dense reference: pool rows, masks and the cached-prefix path."""

from __future__ import annotations

import math

import pytest
import torch

from agentserve.engine.attention import DecodeMetadata, PrefillMetadata, paged_attention, token_rows
from agentserve.engine.decode_attention import DECODE_SPLIT

pytestmark = pytest.mark.unit

BS, KVH, HEADS, D = 16, 2, 4, 8


def reference_rows(slots: list[int], start: int, stop: int) -> list[int]:
    return [slots[p // BS] * BS + p % BS for p in range(start, stop)]


@pytest.mark.parametrize(("start", "stop"), [(0, 1), (0, 40), (16, 50), (21, 22), (30, 64)])
def test_token_rows_follow_the_slot_table(start: int, stop: int) -> None:
    slots = [9, 3, 7, 0]
    assert token_rows(torch.tensor(slots), start, stop, BS).tolist() == reference_rows(slots, start, stop)


@pytest.mark.parametrize(("batch_invariant", "context"), [(False, 40), (True, DECODE_SPLIT)])
def test_decode_rows_pad_short_sequences_and_pick_each_last_token(batch_invariant: bool, context: int) -> None:
    # Batch-invariant decode pads every row to whole splits of the decode attention.
    tables, lengths = [[4, 1, 6], [2]], [40, 5]
    meta = DecodeMetadata.build(tables, BS, lengths, batch_invariant=batch_invariant)
    assert meta.context_len == context
    assert meta.context_rows[0, :40].tolist() == reference_rows(tables[0], 0, 40)
    assert meta.context_rows[1, :5].tolist() == reference_rows(tables[1], 0, 5)
    assert meta.write_rows.tolist() == [reference_rows(tables[0], 39, 40)[0], reference_rows(tables[1], 4, 5)[0]]
    assert torch.equal(torch.isinf(meta.key_mask[0, 0, 0]), torch.arange(context) >= 40)
    assert torch.equal(torch.isinf(meta.key_mask[1, 0, 0]), torch.arange(context) >= 5)


def test_a_prefix_in_consecutive_slots_is_a_view_of_the_pool_and_a_scattered_one_is_gathered() -> None:
    rows = torch.randn(10 * BS, KVH, D)
    consecutive = PrefillMetadata.build([4, 5, 6, 1], BS, num_cached=40, num_new=10)
    assert consecutive.prefix_start == 4 * BS
    view = consecutive.prefix_kv(rows)
    assert view.data_ptr() == rows[4 * BS].data_ptr() and torch.equal(view, rows[reference_rows([4, 5, 6], 0, 40)])
    scattered = PrefillMetadata.build([4, 6, 5, 1], BS, num_cached=40, num_new=10)
    assert scattered.prefix_start is None
    assert torch.equal(scattered.prefix_kv(rows), rows[reference_rows([4, 6, 5], 0, 40)])


def dense_attention(q: torch.Tensor, keys: torch.Tensor, values: torch.Tensor, query_pos: torch.Tensor):
    """q [T, H, d]; keys/values [S, KVH, d] in position order; a query sees keys up to its position."""
    groups = q.shape[1] // keys.shape[1]
    k = keys.repeat_interleave(groups, dim=1).transpose(0, 1)  # [H, S, d]
    v = values.repeat_interleave(groups, dim=1).transpose(0, 1)
    scores = q.transpose(0, 1) @ k.transpose(1, 2) / math.sqrt(q.shape[-1])  # [H, T, S]
    hidden = torch.arange(keys.shape[0])[None, :] > query_pos[:, None]
    probs = scores.masked_fill(hidden, float("-inf")).softmax(-1)
    return (probs @ v).transpose(0, 1)


@pytest.mark.parametrize(
    ("num_cached", "num_new", "scattered"),
    [(0, 30, True), (48, 20, True), (48, 20, False), (21, 1, True), (32, 600, True), (37, 9, False)],
)
def test_prefill_matches_dense_attention(num_cached: int, num_new: int, scattered: bool) -> None:
    torch.manual_seed(num_new)
    total = num_cached + num_new
    num_blocks = -(-total // BS)
    # Scattered and out of order, or consecutive (the prefix is then read as a view of the pool).
    slots = torch.randperm(num_blocks + 5)[:num_blocks].tolist() if scattered else list(range(3, 3 + num_blocks))
    k_rows, v_rows = torch.randn(2, (num_blocks + 5) * BS, KVH, D).unbind(0)
    context_k, context_v = torch.randn(2, total, KVH, D).unbind(0)
    cached = reference_rows(slots, 0, num_cached)
    k_rows[cached], v_rows[cached] = context_k[:num_cached], context_v[:num_cached]
    q = torch.randn(num_new, HEADS, D)
    meta = PrefillMetadata.build(slots, BS, num_cached, num_new)
    out = paged_attention(q, context_k[num_cached:], context_v[num_cached:], k_rows, v_rows, meta, HEADS // KVH)
    expected = dense_attention(q, context_k, context_v, torch.arange(num_cached, total))
    torch.testing.assert_close(out, expected, rtol=1e-5, atol=1e-5)
    new = reference_rows(slots, num_cached, total)
    assert torch.equal(k_rows[new], context_k[num_cached:]) and torch.equal(v_rows[new], context_v[num_cached:])


@pytest.mark.parametrize("batch_invariant", [False, True])
def test_decode_matches_dense_attention_per_sequence(batch_invariant: bool) -> None:
    torch.manual_seed(1)
    tables, lengths = [[5, 2, 7], [1], [3, 0]], [35, 9, 17]
    k_rows, v_rows = torch.randn(2, 8 * BS, KVH, D).unbind(0)
    q, k, v = torch.randn(3, HEADS, D), torch.randn(3, KVH, D), torch.randn(3, KVH, D)
    meta = DecodeMetadata.build(tables, BS, lengths, batch_invariant=batch_invariant)
    out = paged_attention(q, k, v, k_rows, v_rows, meta, HEADS // KVH)
    for b, (table, n) in enumerate(zip(tables, lengths)):
        rows = reference_rows(table, 0, n)
        expected = dense_attention(q[b : b + 1], k_rows[rows], v_rows[rows], torch.tensor([n - 1]))
        torch.testing.assert_close(out[b : b + 1], expected, rtol=1e-5, atol=1e-5)
