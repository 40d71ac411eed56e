"""A MoE engine's per-expert token counts on /metrics, and the recording flag's refusal on a dense model."""

import pytest
from prometheus_client import CollectorRegistry

from agentserve.engine.expert_load import ExpertLoad
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
    load.row(2).add_(load.row(2).new_tensor([0, 5, 1]))
    load.row(0)[0] += 4

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
