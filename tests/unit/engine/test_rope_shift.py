"""RotaryEmbedding.shift: keys rotated at p, shifted by o, are the keys rotated at p + o."""

from __future__ import annotations

import dataclasses

import pytest
import torch

from agentserve.engine.config import ModelConfig
from agentserve.engine.loader import load_model
from agentserve.engine.rope import RotaryEmbedding
from agentserve.engine.shared_context import CollectiveReuse

pytestmark = pytest.mark.unit


def _exact_rotation(raw: torch.Tensor, positions: torch.Tensor, inv_freq: torch.Tensor) -> torch.Tensor:
    """RoPE in float64 throughout: the reference both fp32 paths are measured against."""
    angles = positions.double()[:, None] * inv_freq.double()[None, :]
    cos = torch.cat((angles.cos(), angles.cos()), -1)[:, None]
    sin = torch.cat((-angles.sin(), angles.sin()), -1)[:, None]
    return RotaryEmbedding.rotate(raw.double(), cos, sin)


LLAMA3 = {"rope_type": "llama3", "factor": 8.0, "original_max_position_embeddings": 64}


@pytest.mark.parametrize("scaling", [None, LLAMA3])
@pytest.mark.parametrize(("start", "offset"), [(0, 7), (0, 3000), (500, 1234), (900, -600)])
def test_shifted_keys_equal_keys_rotated_at_the_new_positions(tiny_model_dir, scaling, start: int, offset: int) -> None:
    config = dataclasses.replace(ModelConfig.from_file(tiny_model_dir / "config.json"), rope_scaling=scaling)
    rotary = RotaryEmbedding(config)
    raw = torch.randn(24, 2, config.head_dim, generator=torch.Generator().manual_seed(start))
    at, moved = torch.arange(start, start + 24), torch.arange(start + offset, start + offset + 24)
    cos, sin = rotary.cos_sin(at, 8192, torch.float32)
    new_cos, new_sin = rotary.cos_sin(moved, 8192, torch.float32)
    rotated_here = RotaryEmbedding.rotate(raw, cos, sin)
    shifted = rotary.shift(rotated_here, offset)
    rotated_there = RotaryEmbedding.rotate(raw, new_cos, new_sin)
    torch.testing.assert_close(shifted, rotated_there, rtol=0, atol=2e-4)
    # The rounding left is the fp32 angles': the shifted keys are no further from exact RoPE at
    # the new positions than twice the engine's own rotation error, here or there.
    own_error = max(
        (rotated.double() - _exact_rotation(raw, positions, rotary.inv_freq)).abs().max().item()
        for rotated, positions in ((rotated_here, at), (rotated_there, moved))
    )
    shifted_error = (shifted.double() - _exact_rotation(raw, moved, rotary.inv_freq)).abs().max().item()
    assert shifted_error <= 2 * own_error + 1e-6


def test_shift_by_zero_is_the_identity(tiny_model_dir) -> None:
    rotary = RotaryEmbedding(ModelConfig.from_file(tiny_model_dir / "config.json"))
    keys = torch.randn(5, 2, 64)
    assert torch.equal(rotary.shift(keys, 0), keys)


def test_a_moved_master_has_layer_0_keys_of_a_prefill_at_the_new_position(tiny_model_dir) -> None:
    """Layer 0's keys depend only on the token and its position: the master computed alone at
    [0, L), shifted to where a prompt holds it, is that prompt's own layer 0 up to rounding."""
    model, _ = load_model(tiny_model_dir)
    reuse = CollectiveReuse(model)
    block, before = list(range(300, 340)), list(range(1000, 1037))
    _, master_k, master_v = reuse.full(block)
    _, k, v = reuse.full(before + block)
    shifted = model.model.rotary_emb.shift(master_k[0], len(before))
    torch.testing.assert_close(shifted, k[0, len(before) :], rtol=0, atol=2e-5)
    assert torch.equal(master_v[0], v[0, len(before) :])


def test_shifting_rows_each_by_its_offset_gives_the_bits_of_shifting_them_alone(tiny_model_dir) -> None:
    rotary = RotaryEmbedding(ModelConfig.from_file(tiny_model_dir / "config.json"))
    keys = torch.randn(4, 9, 2, 64, generator=torch.Generator().manual_seed(3))
    offsets = torch.as_tensor([0, 1, 7, 7, -3, 1000, 32767, 5, 123456])
    moved = rotary.shift_rows(keys, offsets)
    alone = torch.stack([rotary.shift(keys[:, i], int(o)) for i, o in enumerate(offsets)], dim=1)
    assert torch.equal(moved, alone)
