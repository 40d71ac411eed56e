"""linears: fused projections and column-major storage compute what plain `nn.Linear`s compute,
and the HF parameters stay the loadable source of truth."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from agentserve.engine.linears import (
    FusedLinear,
    column_major,
    gate_up_halves,
    head_linear,
    row_invariant_linear,
    store_column_major,
)

pytestmark = pytest.mark.unit

# The multi-threaded side of the thread-count checks (the tiers run torch on one thread: tests/conftest.py).
SEVERAL_THREADS = 2


def parts(bias: bool) -> tuple[nn.Linear, nn.Linear, nn.Linear]:
    torch.manual_seed(0)
    return nn.Linear(32, 48, bias=bias), nn.Linear(32, 16, bias=bias), nn.Linear(32, 16, bias=bias)


@pytest.mark.parametrize("bias", [False, True])
def test_fused_output_is_the_parts_outputs_side_by_side(bias: bool) -> None:
    q, k, v = parts(bias)
    originals = [(p.weight.detach().clone(), None if p.bias is None else p.bias.detach().clone()) for p in (q, k, v)]
    fused = FusedLinear(q, k, v)
    x = torch.randn(7, 32)
    expected = torch.cat([F.linear(x, w, b) for w, b in originals], dim=-1)
    torch.testing.assert_close(fused(x), expected, rtol=0, atol=1e-6)
    for part, (w, b) in zip((q, k, v), originals):
        assert torch.equal(part.weight, w)
        if bias:
            assert torch.equal(part.bias, b)


def test_parts_are_views_into_the_fused_weight_so_a_copy_load_reaches_it() -> None:
    q, k, v = parts(bias=True)
    fused = FusedLinear(q, k, v)
    base = fused.weight.untyped_storage().data_ptr()
    assert all(p.weight.untyped_storage().data_ptr() == base for p in (q, k, v))
    with torch.no_grad():
        k.weight.copy_(torch.ones_like(k.weight))
        k.bias.zero_()
    out = fused(torch.ones(1, 32))
    assert torch.equal(out[0, 48:64], torch.full((16,), 32.0))


def test_fuse_again_after_parts_are_replaced() -> None:
    q, k, v = parts(bias=False)
    fused = FusedLinear(q, k, v)
    q.weight = nn.Parameter(torch.zeros(48, 32))  # what load_state_dict(assign=True) does
    fused.fuse()
    assert torch.equal(fused(torch.randn(3, 32))[:, :48], torch.zeros(3, 48))


def test_state_dict_keeps_only_the_hugging_face_names() -> None:
    module = nn.Module()
    module.q_proj, module.k_proj, module.v_proj = parts(bias=False)
    module.qkv = FusedLinear(module.q_proj, module.k_proj, module.v_proj)
    assert sorted(module.state_dict()) == ["k_proj.weight", "q_proj.weight", "v_proj.weight"]


def test_mixed_bias_or_width_is_refused() -> None:
    with pytest.raises(ValueError, match="bias"):
        FusedLinear(nn.Linear(8, 4, bias=True), nn.Linear(8, 4, bias=False))
    with pytest.raises(ValueError, match="input size"):
        FusedLinear(nn.Linear(8, 4), nn.Linear(6, 4))


def test_column_major_keeps_shape_and_values() -> None:
    w = torch.randn(48, 32)
    c = column_major(w)
    assert c.shape == w.shape and c.stride() == (1, 48) and torch.equal(c, w)
    layer = nn.Linear(32, 48)
    before = layer.weight.detach().clone()
    store_column_major(layer)
    assert layer.weight.stride() == (1, 48) and torch.equal(layer.weight, before)


# The default model's linear shapes: q|k|v, o_proj, gate|up, down, the tied LM head.
LINEAR_SHAPES = [(256, 512), (256, 256), (256, 1408), (704, 256), (256, 8192)]


@pytest.mark.parametrize(("n_in", "n_out"), LINEAR_SHAPES)
def test_row_invariant_linear_gives_a_row_the_same_bits_at_every_row_count_and_thread_count(n_in, n_out) -> None:
    torch.manual_seed(n_out)
    weight, bias = column_major(torch.randn(n_out, n_in) * 0.05), torch.randn(n_out)
    x = torch.randn(300, n_in)
    threads = torch.get_num_threads()
    try:
        torch.set_num_threads(SEVERAL_THREADS)
        whole = row_invariant_linear(x, weight, bias)
        for rows in (1, 2, 3, 4, 5, 17, 64, 299):
            for part in (slice(0, rows), slice(300 - rows, 300)):
                assert torch.equal(row_invariant_linear(x[part], weight, bias), whole[part])
        torch.set_num_threads(1)
        assert torch.equal(row_invariant_linear(x, weight, bias), whole)
        assert torch.equal(row_invariant_linear(x[7:8], weight, bias), whole[7:8])
    finally:
        torch.set_num_threads(threads)
    torch.testing.assert_close(whole, F.linear(x, weight, bias), rtol=0, atol=1e-5)


def _slab_row_counts_on_several_and_one_thread() -> Iterator[int]:
    """Row counts either side of the slab limit (`SLAB_MAX_ROWS` = 64), on several threads, then on one."""
    threads = torch.get_num_threads()
    try:
        for num_threads in (SEVERAL_THREADS, 1):
            torch.set_num_threads(num_threads)
            yield from (1, 3, 4, 40, 64, 65, 300)
    finally:
        torch.set_num_threads(threads)


@pytest.mark.parametrize("bias", [False, True])
def test_gate_up_halves_are_the_row_invariant_products_halves_at_every_row_count(bias: bool) -> None:
    torch.manual_seed(1)
    weight = column_major(torch.randn(1408, 256) * 0.05)
    b = torch.randn(1408) if bias else None
    x = torch.randn(300, 256)
    for rows in _slab_row_counts_on_several_and_one_thread():
        expected = row_invariant_linear(x[:rows], weight, b)
        gate, up = gate_up_halves(x[:rows], weight, b)
        assert torch.equal(gate, expected[:, :704]) and torch.equal(up, expected[:, 704:])


def test_head_linear_gives_the_row_invariant_products_bits_at_every_row_and_thread_count() -> None:
    torch.manual_seed(2)
    weight = column_major(torch.randn(8192, 256) * 0.05)
    x = torch.randn(300, 256)
    for rows in _slab_row_counts_on_several_and_one_thread():
        assert torch.equal(head_linear(x[:rows], weight), row_invariant_linear(x[:rows], weight))
    # A vocabulary the slabs do not divide, and a row-major weight, take the plain product.
    odd = column_major(torch.randn(1001, 256))
    assert torch.equal(head_linear(x[:5], odd), row_invariant_linear(x[:5], odd))
    row_major = torch.randn(8192, 256)
    assert torch.equal(head_linear(x[:5], row_major), row_invariant_linear(x[:5], row_major))
    assert torch.equal(head_linear(x[:5], weight, batch_invariant=False), F.linear(x[:5], weight))
