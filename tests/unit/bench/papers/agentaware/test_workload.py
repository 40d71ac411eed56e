"""bench agentaware's workload: TraceLab tool sample, code-writer and deep-research DAGs, tool
times drawn from the sample, predictions, critical-path marking."""

import json

import pytest

from agentserve.bench.common.workloads.model import components, topological_turns
from agentserve.bench.papers.agentaware.workload import (
    AgentAwareSpec,
    ToolSample,
    describe,
    generate,
    job_shape,
    read_tool_sample,
)

pytestmark = pytest.mark.unit

SAMPLE = ToolSample((("Bash", 0.2), ("Bash", 0.4), ("WebSearch", 16.0), ("Write", 10.0), ("Bash", 3.0)), "test")


def test_read_tool_sample(tmp_path):
    path = tmp_path / "rounds.jsonl"
    rows = [
        {
            "tools": [
                {"tool_name": "Bash", "tool_wall_latency_ms": 860},
                {"tool_name": "WebSearch", "tool_wall_latency_ms": 16113},
            ]
        },
        {"tools": []},
        {"tools": [{"tool_name": "Bash", "tool_wall_latency_ms": 140}]},
    ]
    path.write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    sample = read_tool_sample(path)
    assert sample.calls == (("Bash", 0.86), ("WebSearch", 16.113), ("Bash", 0.14))
    assert sample.medians() == {"Bash": 0.5, "WebSearch": 16.113}
    assert sample.to_dict()["median_s"] == 0.86


def test_read_tool_sample_refuses_a_bad_line(tmp_path):
    path = tmp_path / "bad.jsonl"
    path.write_text('{"tools": [{"tool_name": "Bash"}]}\n')
    with pytest.raises(ValueError, match="bad.jsonl:1: not a TraceLab round"):
        read_tool_sample(path)


def test_jobs_alternate_shapes_and_are_separate_components():
    w = generate(AgentAwareSpec(jobs=4, width=3, rounds=3), SAMPLE)
    assert job_shape(w) == {
        "j000": "code-writer",
        "j001": "deep-research",
        "j002": "code-writer",
        "j003": "deep-research",
    }
    assert [len(c) for c in components(w)] == [5, 4, 5, 4]
    assert len(topological_turns(w)) == w.num_turns


def test_code_writer_fans_out_and_gathers():
    w = generate(AgentAwareSpec(jobs=1, width=2, rounds=3), SAMPLE)
    by = w.by_id()
    assert sorted(by) == ["j000-coder0", "j000-coder1", "j000-planner", "j000-reviewer"]
    for coder in ("j000-coder0", "j000-coder1"):
        turns = by[coder].turns
        assert turns[0].after == ("j000-planner#0",)
        assert [len(t.tools) for t in turns] == [1, 1, 0]  # a tool after every turn but the last
    reviewer = by["j000-reviewer"].turns
    assert reviewer[0].after == ("j000-coder0", "j000-coder1")
    assert reviewer[0].new_tokens == 2 * 64  # every coder's output
    assert len(reviewer[0].tools) == 1
    assert by["j000-planner"].turns[1].after == ("j000-reviewer",)


def test_deep_research_rounds_are_all_gathers():
    w = generate(AgentAwareSpec(jobs=2, width=3, rounds=3), SAMPLE)
    by = w.by_id()
    r1 = by["j001-researcher1"].turns
    assert r1[0].after == ("j001-lead#0",)
    assert r1[1].after == ("j001-researcher0#0", "j001-researcher2#0")
    assert r1[2].after == ("j001-researcher0#1", "j001-researcher2#1")
    keys = {by[f"j001-researcher{i}"].turns[2].content_key for i in range(3)}
    assert keys == {"j001-gather-1"}  # the same gathered text for every peer
    assert by["j001-lead"].turns[1].after == ("j001-researcher0", "j001-researcher1", "j001-researcher2")


def test_tool_times_come_from_the_sample_with_the_chosen_prediction():
    medians = SAMPLE.medians()
    for prediction in ("median", "exact", "none"):
        w = generate(AgentAwareSpec(jobs=4, prediction=prediction), SAMPLE)
        tools = [t for s in w.sessions for turn in s.turns for t in turn.tools]
        assert tools and all((t.name, t.duration_s) in SAMPLE.calls for t in tools)
        expected = {"median": lambda t: medians[t.name], "exact": lambda t: t.duration_s, "none": lambda t: None}
        assert all(t.predicted_s == expected[prediction](t) for t in tools)


def test_critical_path_is_coordinators_and_the_slowest_worker():
    w = generate(AgentAwareSpec(jobs=2, width=3, rounds=3), SAMPLE)
    for job in components(w):
        workers = [s for s in job if s.agent in ("coder", "researcher")]
        slowest = max(workers, key=lambda s: sum(t.tool_time_s() for t in s.turns))
        assert {s.id for s in job if s.critical} == {s.id for s in job if s not in workers} | {slowest.id}


def test_default_scale_has_at_least_64_agents_and_is_seeded():
    spec = AgentAwareSpec()
    first, again = generate(spec, SAMPLE), generate(spec, SAMPLE)
    assert first == again
    shape = describe(first)
    assert shape["agents"] == 72
    assert shape["jobs_by_shape"] == {"code-writer": 8, "deep-research": 8}
    assert generate(AgentAwareSpec(seed=1), SAMPLE) != first


@pytest.mark.parametrize(
    "kwargs, message",
    [
        ({"jobs": 0}, "jobs must be >= 1"),
        ({"prediction": "psychic"}, "prediction must be one of"),
        ({"system_tokens": -1}, "system_tokens must be >= 0"),
    ],
)
def test_spec_is_validated(kwargs, message):
    with pytest.raises(ValueError, match=message):
        AgentAwareSpec(**kwargs)
