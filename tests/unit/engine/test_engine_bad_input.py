"""Bad input fails early with a clear ValueError, never deep inside torch."""

from __future__ import annotations

import pytest
import torch

from agentserve.contracts import SamplingParams
from agentserve.engine.engine import LLMEngine
from agentserve.engine.engine_config import EngineConfig
from agentserve.kv.block_format import serialize_blocks

pytestmark = pytest.mark.unit


@pytest.fixture(scope="module")
def engine(tiny_model_dir):
    return LLMEngine.from_dir(tiny_model_dir, EngineConfig(kv_cache_bytes=32 << 20))


def test_token_id_out_of_range(engine):
    with pytest.raises(ValueError, match="token id 8192 at position 1 is out of range for vocab size 8192"):
        engine.add_request([5, 8192], SamplingParams())
    with pytest.raises(ValueError, match="token id -1 at position 0"):
        engine.add_request([-1], SamplingParams())


def test_empty_prompt(engine):
    with pytest.raises(ValueError, match="prompt is empty"):
        engine.add_request([], SamplingParams())


@pytest.mark.parametrize("max_tokens", [0, -3])
def test_non_positive_max_tokens(max_tokens):
    with pytest.raises(ValueError, match="max_tokens must be positive"):
        SamplingParams(max_tokens=max_tokens)


def test_context_overflow(engine):
    with pytest.raises(ValueError, match="exceeds the model's context length 32768"):
        engine.add_request([5] * 100, SamplingParams(max_tokens=32700))


def test_block_from_another_model_rejected(engine):
    shape = (
        engine.model_config.num_hidden_layers,
        1,
        16,
        engine.model_config.num_key_value_heads,
        engine.model_config.head_dim,
    )
    data = serialize_blocks(
        torch.zeros(shape),
        torch.zeros(shape),
        block_ids=[b"\x01" * 16],
        fingerprint="someothermodel00",
        kv_dtype="native",
    )
    with pytest.raises(ValueError, match="someothermodel00"):
        engine.import_blocks(data)


def test_engine_still_serves_after_bad_input(engine):
    with pytest.raises(ValueError):
        engine.add_request([5, 99999], SamplingParams())
    assert not engine.has_unfinished()
    assert len(engine.generate([5, 6, 7], SamplingParams(max_tokens=3, ignore_eos=True)).output_token_ids) == 3
