"""Training the tiny preset's mixtral variant: the training forward computes what the engine
serves, every weight (routers included) learns, the load-balancing term is Switch's, and two
runs of the same config give the same weights."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

from agentserve.engine.config import ModelConfig
from agentserve.engine.model_init import init_model
from agentserve.training.forward import TrainingForward, sparse_block
from agentserve.training.trainer import TrainConfig, train

from .test_forward import TOKENS, engine_logits

pytestmark = pytest.mark.unit


@pytest.fixture(scope="module")
def mixtral_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return init_model(tmp_path_factory.mktemp("mixtral"), "tiny", seed=0, model_type="mixtral")


def test_logits_match_the_engines(mixtral_dir: Path) -> None:
    forward = TrainingForward(ModelConfig.from_file(mixtral_dir / "config.json"))
    with torch.no_grad():
        ours = forward.logits(load_file(mixtral_dir / "model.safetensors"), TOKENS)
    reference = engine_logits(mixtral_dir, TOKENS)
    assert (ours - reference).abs().max().item() <= 1e-4 * reference.abs().max().item()


def test_every_weight_gets_a_gradient(mixtral_dir: Path) -> None:
    forward = TrainingForward(ModelConfig.from_file(mixtral_dir / "config.json"), router_aux_coef=0.01)
    weights = {k: v.requires_grad_() for k, v in load_file(mixtral_dir / "model.safetensors").items()}
    forward.loss(weights, TOKENS[:, :33]).backward()
    assert all(w.grad is not None and w.grad.abs().sum() > 0 for w in weights.values())


def test_a_uniform_router_scores_one_on_the_balance_term(mixtral_dir: Path) -> None:
    config = ModelConfig.from_file(mixtral_dir / "config.json")
    assert config.moe is not None
    weights = load_file(mixtral_dir / "model.safetensors")
    weights["model.layers.0.block_sparse_moe.gate.weight"] = torch.zeros(8, 256)
    # Equal probabilities 1/E: experts * sum_e share_e / experts = 1, however the ties are routed.
    _, balance = sparse_block(torch.randn(10, 256), weights, "model.layers.0.block_sparse_moe.", config.moe)
    assert balance.item() == pytest.approx(1.0)


def test_same_config_gives_the_same_weights() -> None:
    config = TrainConfig(steps=2, batch_size=1, seq_len=32, warmup_steps=1, model_type="mixtral")
    first, second = train(config, log=lambda _: None), train(config, log=lambda _: None)
    assert first.losses == second.losses
    assert all(torch.equal(first.weights[k], second.weights[k]) for k in first.weights)
    assert "model.layers.3.block_sparse_moe.experts.7.w2.weight" in first.weights
