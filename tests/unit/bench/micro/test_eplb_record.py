"""Recording a MoE engine's expert loads on the corpus's agent sessions."""

from __future__ import annotations

import pytest

from agentserve.bench.micro.eplb_loads import Recording
from agentserve.bench.micro.eplb_record import agent_sessions, record_agent_loads
from agentserve.engine.model_init import init_model

pytestmark = pytest.mark.unit


def test_each_round_extends_the_previous_one():
    sessions = agent_sessions(rounds=3)
    assert len(sessions) == 29  # the corpus's 87 tool dialogues, three per session
    for rounds in sessions:
        assert [m["role"] for m in rounds[0]].count("tool") >= 1
        assert rounds[1][: len(rounds[0])] == rounds[0] and rounds[2][: len(rounds[1])] == rounds[1]


def test_recording_counts_every_computed_token_once_per_chosen_expert(tmp_path):
    model_dir = init_model(tmp_path / "moe", "tiny", seed=0, model_type="mixtral")
    out = tmp_path / "loads.jsonl"
    summary = record_agent_loads(model_dir, out, rounds=2, batch=4, max_tokens=3, max_sessions=4)
    recording = Recording.read(out)
    assert (recording.num_experts, recording.top_k, recording.layers) == (8, 2, [0, 1, 2, 3])
    assert summary["cached_prompt_tokens"] > 0  # round 2 reuses round 1's prefix
    computed = summary["prompt_tokens"] - summary["cached_prompt_tokens"] + summary["sessions"] * 2 * (3 - 1)
    for layer in range(4):
        assert sum(sum(f[layer]) for f in recording.forwards) == 2 * computed
