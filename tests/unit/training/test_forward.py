"""The training forward pass computes what the engine serves, on the same checkpoint."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

from agentserve.bench.micro.perplexity import BLOCK_SIZE
from agentserve.engine.attention import PrefillMetadata
from agentserve.engine.config import ModelConfig
from agentserve.engine.default_model import ensure_default_model
from agentserve.engine.kv_pool import KVPool
from agentserve.engine.loader import load_model
from agentserve.training.forward import TrainingForward

pytestmark = pytest.mark.unit

TOKENS = torch.randint(0, 8192, (2, 96), generator=torch.Generator().manual_seed(3))


def engine_logits(model_dir: Path, tokens: torch.Tensor) -> torch.Tensor:
    model, _ = load_model(model_dir, "fp32")
    rows = []
    for seq in tokens:
        n = len(seq)
        pool = KVPool(model.config, num_slots=-(-n // BLOCK_SIZE), block_size=BLOCK_SIZE, dtype=torch.float32)
        meta = PrefillMetadata.build(list(range(pool.num_slots)), BLOCK_SIZE, 0, n)
        rows.append(model(seq, torch.arange(n), pool, meta))
    return torch.stack(rows)


@pytest.mark.parametrize("weights", ["trained", "random"])
def test_logits_match_the_engines(weights: str, tiny_model_dir: Path) -> None:
    model_dir = ensure_default_model() if weights == "trained" else tiny_model_dir
    forward = TrainingForward(ModelConfig.from_file(model_dir / "config.json"))
    with torch.no_grad():
        ours = forward.logits(load_file(model_dir / "model.safetensors"), TOKENS)
    reference = engine_logits(model_dir, TOKENS)
    assert ours.shape == reference.shape == (2, 96, 8192)
    assert (ours - reference).abs().max().item() <= 1e-4 * reference.abs().max().item()


def test_every_weight_gets_a_gradient(tiny_model_dir: Path) -> None:
    forward = TrainingForward(ModelConfig.from_file(tiny_model_dir / "config.json"))
    weights = {k: v.requires_grad_() for k, v in load_file(tiny_model_dir / "model.safetensors").items()}
    forward.loss(weights, TOKENS[:, :17]).backward()
    assert all(w.grad is not None and w.grad.abs().sum() > 0 for w in weights.values())


def test_only_the_bias_free_llama_trains(tiny_model_dir: Path) -> None:
    raw = ModelConfig.from_file(tiny_model_dir / "config.json").to_dict()
    with pytest.raises(ValueError, match="training supports the bias-free llama and mixtral architectures only"):
        TrainingForward(ModelConfig.from_dict({**raw, "model_type": "qwen2"}))
