"""A MoE engine's per-expert token counts on /metrics, and the recording flag's refusal on a dense model."""

import pytest
import torch
from prometheus_client import CollectorRegistry

from agentserve.engine.expert_load import ExpertLoad
from agentserve.engine.expert_placement import ExpertPlacement
from agentserve.engine.loader import load_model
from agentserve.engine.moe_config import MoeConfig
from agentserve.engine_service.expert_metrics import ExpertLoadCollector, record_expert_load, register_expert_metrics

pytestmark = pytest.mark.unit


def test_counts_by_layer_and_expert_follow_the_model_counts():
    load = ExpertLoad(
        MoeConfig(num_experts=3, top_k=1, expert_intermediate_size=4, renormalise=True, sparse_layers=(0, 2))
    )
    registry = CollectorRegistry()
    registry.register(ExpertLoadCollector(load))
    load.layer(2).counts.add_(torch.tensor([0, 5, 1]))
    load.layer(0).counts[0] += 4

    def tokens(layer: int, expert: int) -> float | None:
        return registry.get_sample_value(
            "agentserve_engine_expert_tokens_total", {"layer": str(layer), "expert": str(expert)}
        )

    assert [tokens(0, e) for e in range(3)] == [4.0, 0.0, 0.0]
    assert [tokens(2, e) for e in range(3)] == [0.0, 5.0, 1.0]
    assert tokens(1, 0) is None  # layer 1 is dense


def test_dense_model_exports_nothing_and_refuses_recording(tiny_model_dir, tmp_path):
    model, _ = load_model(tiny_model_dir)
    assert register_expert_metrics(model) is None
    with pytest.raises(ValueError, match="record_expert_load"):
        record_expert_load(model, str(tmp_path / "loads.jsonl"))


def test_a_placed_model_exports_each_rank_s_copies():
    load = ExpertLoad(
        MoeConfig(num_experts=2, top_k=1, expert_intermediate_size=4, renormalise=True, sparse_layers=(0,))
    )
    registry = CollectorRegistry()
    registry.register(ExpertLoadCollector(load))
    assert registry.get_sample_value("agentserve_engine_expert_rank_tokens_total", {"layer": "0", "rank": "0"}) is None
    load.place(ExpertPlacement(ranks=2, layers=(0,), slots=((0, 1, 0, 1),)))
    load.layer(0).split.assign(torch.tensor([[0], [0], [1]]))  # expert 0's copies to ranks 0, 1; expert 1's to 0

    def copies(rank: int) -> float | None:
        return registry.get_sample_value(
            "agentserve_engine_expert_rank_tokens_total", {"layer": "0", "rank": str(rank)}
        )

    assert [copies(0), copies(1)] == [2.0, 1.0]
