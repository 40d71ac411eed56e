"""RopeShift (what diff storage predicts and restores with) shifts keys bit for bit as the engine
does (`RotaryEmbedding.shift`): otherwise every row of a sibling would differ from its master."""

from __future__ import annotations

import dataclasses

import pytest
import torch

from agentserve.engine.config import ModelConfig
from agentserve.engine.rope import RotaryEmbedding, inverse_frequencies
from agentserve.kv.rope_shift import RopeShift

pytestmark = pytest.mark.unit

LLAMA3 = {"rope_type": "llama3", "factor": 8.0, "original_max_position_embeddings": 64}


@pytest.mark.parametrize("scaling", [None, LLAMA3])
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16, torch.float32])
@pytest.mark.parametrize("offset", [0, 7, -600, 3000, 131071])
def test_the_store_shifts_keys_exactly_as_the_engine(tiny_model_dir, scaling, dtype, offset):
    config = dataclasses.replace(ModelConfig.from_file(tiny_model_dir / "config.json"), rope_scaling=scaling)
    engine = RotaryEmbedding(config)
    store = RopeShift(inverse_frequencies(config))
    keys = torch.randn(4, 16, config.num_key_value_heads, config.head_dim, generator=torch.Generator().manual_seed(1))
    keys = keys.to(dtype)
    ours = store.shift(keys, offset)
    theirs = torch.stack([engine.shift(layer, offset) for layer in keys])
    as_int = {2: torch.int16, 4: torch.int32}[dtype.itemsize]
    assert torch.equal(ours.view(as_int), theirs.view(as_int))


def test_for_theta_gives_the_engines_frequencies(tiny_model_dir):
    config = ModelConfig.from_file(tiny_model_dir / "config.json")
    assert torch.equal(
        RopeShift.for_theta(config.rope_theta, config.head_dim).inv_freq, inverse_frequencies(config).double()
    )
