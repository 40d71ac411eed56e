import pytest
import torch

from agentserve.kv.block_format import deserialize_blocks, serialize_blocks
from agentserve.kv.block_hash import block_ids_for
from agentserve.kv.fp8 import FP8_MAX, dequantize, quantize_per_token, round_to_fp8

pytestmark = pytest.mark.unit


def rows(seed=0, shape=(6, 16, 2, 8), dtype=torch.float32):
    gen = torch.Generator().manual_seed(seed)
    ranges = torch.logspace(-3, 3, shape[0]).reshape(-1, *[1] * (len(shape) - 1))  # rows of very different ranges
    return (torch.randn(shape, generator=gen) * ranges).to(dtype)


def test_scales_are_the_smallest_powers_of_two_that_fit():
    x = torch.zeros(4, 1, 2)
    x[0, 0, 0] = 448.0  # exactly e4m3's max: scale 1
    x[1, 0, 1] = -449.0  # just over: scale 2
    x[2, 0, 0] = 3.0  # 3 / 448 -> 2**-7
    q, scales = quantize_per_token(x)
    assert scales.tolist() == [1.0, 2.0, 2.0**-7, 1.0]  # the all-zero row keeps scale 1
    assert bool((q.float().abs() <= FP8_MAX).all())
    assert dequantize(q, scales, torch.float32)[3].abs().sum().item() == 0


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_round_to_fp8_is_idempotent(dtype):
    once = round_to_fp8(rows(dtype=dtype))
    assert once.dtype == dtype
    assert torch.equal(round_to_fp8(once), once)
    assert torch.equal(round_to_fp8(once * 0.25), once * 0.25)  # a power-of-two rescale stays on the grid


def test_a_tokens_value_depends_only_on_its_own_row():
    x = rows()
    alone = round_to_fp8(x[:, 3])
    x[:, 4:] *= 1e4  # later tokens of the same blocks with a far larger range
    assert torch.equal(round_to_fp8(x)[:, 3], alone)


def test_error_bounded_by_a_sixteenth_of_the_row_range():
    x = rows()
    err = (round_to_fp8(x) - x).abs()
    amax = x.abs().amax(dim=(-2, -1), keepdim=True)
    assert bool((err <= amax / 16).all())


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_block_format_carries_fp8_kv_without_change(dtype):
    """KV already on the FP8 grid (what an FP8 engine's pool holds) survives the wire bit for bit."""
    k = round_to_fp8(rows(1, (3, 4, 16, 2, 8), dtype))
    v = round_to_fp8(rows(2, (3, 4, 16, 2, 8), dtype))
    ids = block_ids_for(list(range(64)), 16, "fp", "")
    out = deserialize_blocks(serialize_blocks(k, v, ids, "fp", kv_dtype="fp8_e4m3"))
    assert out.k.dtype == dtype
    assert torch.equal(out.k, k) and torch.equal(out.v, v)
