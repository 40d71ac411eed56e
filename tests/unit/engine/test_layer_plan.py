"""The derived forward pass: norm and rope match HF's arithmetic bit for bit, a prefill on a
cached prefix gives the full prefill's logits, and the module tree still names HF's parameters."""

from __future__ import annotations

import pytest
import torch

from agentserve.contracts import SamplingParams
from agentserve.engine.config import ModelConfig
from agentserve.engine.kv_pool import KVPool
from agentserve.engine.layer_plan import Norm
from agentserve.engine.loader import load_model
from agentserve.engine.rope import RotaryEmbedding, inverse_frequencies
from agentserve.engine.runner import ModelRunner
from agentserve.engine.sequence import Sequence
from tests.unit.engine.test_model_parity import VARIANTS, _build_hf

pytestmark = pytest.mark.unit


def hf_rms_norm(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    x32 = x.to(torch.float32)
    x32 = x32 * torch.rsqrt(x32.pow(2).mean(-1, keepdim=True) + eps)
    return weight * x32.to(x.dtype)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_norm_is_hf_rms_norm_bit_for_bit(dtype: torch.dtype) -> None:
    torch.manual_seed(0)
    x, weight = torch.randn(40, 96, dtype=dtype), torch.randn(96, dtype=dtype)
    assert torch.equal(Norm.build(weight, 1e-5)(x), hf_rms_norm(x, weight, 1e-5))


@pytest.fixture(scope="module")
def hf_dir(tmp_path_factory):
    out = tmp_path_factory.mktemp("qwen2")
    kind, extra = VARIANTS["qwen2"]
    _build_hf(kind, extra, out)
    return out


def test_rope_is_hf_rotate_half_bit_for_bit_past_the_first_table(hf_dir) -> None:
    config = ModelConfig.from_file(hf_dir / "config.json")
    rope, half = RotaryEmbedding(config), config.head_dim // 2
    x = torch.randn(6, 3, config.head_dim)
    for positions in (torch.tensor([0, 1, 2, 3, 4, 5]), torch.tensor([7, 900, 3, 2047, 11, 1500])):
        cos, sin = rope.cos_sin(positions, int(positions.max()) + 1, x.dtype)
        freqs = positions.float()[:, None] * inverse_frequencies(config).float()[None, :]
        emb = torch.cat((freqs, freqs), dim=-1)
        hf_cos, hf_sin = emb.cos()[:, None, :], emb.sin()[:, None, :]
        rotated = torch.cat((-x[..., half:], x[..., :half]), dim=-1)
        assert torch.equal(RotaryEmbedding.rotate(x, cos, sin), x * hf_cos + rotated * hf_sin)


def prefill_logits(runner: ModelRunner, tokens: list[int], slots: list[int], num_cached: int) -> torch.Tensor:
    seq = Sequence(list(tokens), len(tokens), SamplingParams())
    seq.slots = slots
    return runner.prefill(seq, num_cached)


@pytest.mark.parametrize("num_new", [1, 20, 37])
def test_prefill_on_a_cached_prefix_gives_the_full_prefills_logits(hf_dir, num_new: int) -> None:
    model, _ = load_model(hf_dir)
    runner = ModelRunner(model, KVPool(model.config, num_slots=40, block_size=16, dtype=torch.float32))
    tokens = torch.randint(
        0, model.config.vocab_size, (160 + num_new,), generator=torch.Generator().manual_seed(num_new)
    ).tolist()
    slots = torch.randperm(40, generator=torch.Generator().manual_seed(1))[: -(-len(tokens) // 16)].tolist()
    full = prefill_logits(runner, tokens, slots, 0)
    cached = prefill_logits(runner, tokens, slots, 160)  # the first 160 tokens' KV is in the pool now
    torch.testing.assert_close(cached, full, rtol=1e-5, atol=1e-5)


def test_parameters_keep_hugging_face_names_and_derived_tensors_stay_out(hf_dir) -> None:
    model, _ = load_model(hf_dir)
    names = set(model.state_dict())
    assert "model.layers.0.self_attn.q_proj.bias" in names and "model.layers.1.mlp.up_proj.weight" in names
    assert not [n for n in names if any(part in n for part in ("qkv", "gate_up", "tied_head", "_cos", "_sin"))]
    attn = model.model.layers[0].self_attn
    assert attn.q_proj.weight.untyped_storage().data_ptr() == attn.qkv.weight.untyped_storage().data_ptr()


def test_runner_refuses_a_pool_of_another_dtype(hf_dir) -> None:
    model, _ = load_model(hf_dir)
    with pytest.raises(ValueError, match="dtype"):
        ModelRunner(model, KVPool(model.config, num_slots=4, block_size=16, dtype=torch.bfloat16))
