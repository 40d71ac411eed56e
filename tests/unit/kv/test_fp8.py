import pytest
import torch

from agentserve.kv.block_format import deserialize_blocks, serialize_blocks
from agentserve.kv.block_hash import block_ids_for
from agentserve.kv.fp8 import FP8_MAX, dequantize, hadamard, hadamard_group, quantize_per_token, round_to_fp8

pytestmark = pytest.mark.unit


def rows(seed=0, shape=(6, 16, 2, 8), dtype=torch.float32):
    gen = torch.Generator().manual_seed(seed)
    ranges = torch.logspace(-3, 3, shape[0]).reshape(-1, *[1] * (len(shape) - 1))  # rows of very different ranges
    return (torch.randn(shape, generator=gen) * ranges).to(dtype)


def test_scales_are_the_smallest_powers_of_two_that_fit():
    x = torch.zeros(4, 2, 1)  # head_dim 1: a Hadamard group of one channel, the identity
    x[0, 0, 0] = 448.0  # exactly e4m3's max: scale 1
    x[1, 1, 0] = -449.0  # just over: scale 2
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
    x = rows(dtype=torch.bfloat16).float()
    err = (round_to_fp8(x.bfloat16()).float() - x).abs()
    amax = x.abs().amax(dim=(-2, -1), keepdim=True)
    assert bool((err <= amax / 16).all())


def test_hadamard_basis_keeps_each_rows_relative_error_within_a_sixteenth():
    """The basis is orthogonal up to a power of two, so a row's L2 error is its rotated rows': within
    1/16 of its norm, plus half of e4m3's smallest step (2**-10 of the scale) per value under the
    normal range."""
    x = rows(shape=(6, 16, 2, 64))
    _, scales = quantize_per_token(x)
    err = (round_to_fp8(x) - x).flatten(-2).norm(dim=-1)
    bound = x.flatten(-2).norm(dim=-1) / 16 + (128 / 64) ** 0.5 * 2.0**-10 * scales
    assert bool((err <= bound).all())


@pytest.mark.parametrize(("head_dim", "group"), [(64, 64), (128, 64), (80, 16), (8, 8)])
def test_hadamard_is_its_own_inverse_up_to_the_group_size(head_dim, group):
    assert hadamard_group(head_dim) == group
    x = torch.randn(4, 16, 2, head_dim, generator=torch.Generator().manual_seed(0))
    assert torch.allclose(hadamard(hadamard(x)) / group, x, rtol=1e-5, atol=1e-5)


def test_round_to_fp8_is_idempotent_at_the_exactness_bound():
    """A row whose 64 rotated values all sit at e4m3's largest value with one sign, beside rows
    with values down to its smallest step: the transform back sums the most units it ever does."""
    q = torch.full((3, 1, 64), FP8_MAX)
    q[1, 0, ::2] = -FP8_MAX
    q[2, 0, :32] = 2.0**-9  # the smallest subnormal beside the largest value
    rotated_back = dequantize(q.to(torch.float8_e4m3fn), torch.tensor([2.0**-3, 1.0, 2.0**5]), torch.float32)
    once = round_to_fp8(rotated_back)
    assert torch.equal(once, rotated_back)
    assert torch.equal(round_to_fp8(once), once)


@pytest.mark.parametrize("head_dim", [64, 128, 80])
def test_hadamard_basis_is_idempotent_for_head_dims(head_dim):
    once = round_to_fp8(rows(shape=(6, 16, 2, head_dim)))
    assert torch.equal(round_to_fp8(once), once)


def test_hadamard_basis_cuts_the_error_of_keys_with_an_outlier_channel():
    """Why the basis: keys whose `q . k` rides on a few large channels, as real models' do. The
    logit error under the basis is a fraction of the one in the channels as they are."""
    gen = torch.Generator().manual_seed(5)
    keys = torch.randn(256, 1, 64, generator=gen)
    keys[..., 7] *= 30  # an outlier channel
    query = torch.randn(64, generator=gen)
    query[7] *= 30
    logits = keys[:, 0] @ query
    rotated = (round_to_fp8(keys)[:, 0] @ query - logits).abs().mean()
    plain = (round_to_fp8(keys.bfloat16()).float()[:, 0] @ query - logits).abs().mean()
    assert rotated < plain / 3


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_block_format_carries_fp8_kv_without_change(dtype):
    """KV already on the FP8 grid (what an FP8 engine's pool holds) survives the wire bit for bit."""
    k = round_to_fp8(rows(1, (3, 4, 16, 2, 8), dtype))
    v = round_to_fp8(rows(2, (3, 4, 16, 2, 8), dtype))
    ids = block_ids_for(list(range(64)), 16, "fp", "")
    out = deserialize_blocks(serialize_blocks(k, v, ids, "fp", kv_dtype="fp8_e4m3"))
    assert out.k.dtype == dtype
    assert torch.equal(out.k, k) and torch.equal(out.v, v)
