"""Mooncake and TraceLab readers, agentserve's session format, and the facts they must keep."""

import json
from pathlib import Path

import pytest

from agentserve.bench.common.workloads import detect_format, load_workload
from agentserve.bench.common.workloads.mooncake import read_mooncake
from agentserve.bench.common.workloads.session_format import read_workload, write_workload
from agentserve.bench.common.workloads.tracelab import read_tracelab
from tests.support.traces import MOONCAKE_CONVERSATION, TRACELAB_ROUNDS

pytestmark = pytest.mark.unit


def _jsonl(path: Path, rows: list[dict]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def test_mooncake_requests_become_sessions_that_wait_for_the_prompt_they_extend(tmp_path):
    rows = [
        {"timestamp": 0, "input_length": 1100, "output_length": 10, "hash_ids": [0, 1, 2]},
        {"timestamp": 500, "input_length": 600, "output_length": 5, "hash_ids": [0, 7]},  # system block only
        {"timestamp": 900, "input_length": 1600, "output_length": 7, "hash_ids": [0, 1, 3, 4]},  # extends #0
        {"timestamp": 1200, "input_length": 2100, "output_length": 0, "hash_ids": [0, 1, 3, 4, 5]},  # extends #2
    ]
    w = read_mooncake(_jsonl(tmp_path / "t.jsonl", rows))
    assert [s.id for s in w.sessions] == ["mc-000000", "mc-000001", "mc-000002", "mc-000003"]
    assert [s.arrival_s for s in w.sessions] == [0.0, 0.5, 0.9, 1.2]
    assert [s.after for s in w.sessions] == [(), (), ("mc-000000",), ("mc-000002",)]
    assert [s.is_first(0) for s in w.sessions] == [True, True, False, False]
    assert w.sessions[3].turns[0].output_tokens == 1  # a zero-token answer still needs one generated token
    assert all(s.tenant == "mooncake" for s in w.sessions)
    unchained = read_mooncake(tmp_path / "t.jsonl", chain=False, limit=3)
    assert [s.after for s in unchained.sessions] == [(), (), ()]
    assert unchained.sessions[2].is_first(0) is False


def test_mooncake_rejects_malformed_records(tmp_path):
    bad = _jsonl(
        tmp_path / "bad.jsonl", [{"timestamp": 0, "input_length": 1100, "output_length": 1, "hash_ids": [0, 1]}]
    )
    with pytest.raises(ValueError, match="only 2 hash ids"):
        read_mooncake(bad)
    with pytest.raises(ValueError, match="not a Mooncake record"):
        read_mooncake(_jsonl(tmp_path / "bad2.jsonl", [{"timestamp": 0}]))


def test_mooncake_conversation_trace_has_the_documented_share_of_extending_requests():
    w = load_workload(MOONCAKE_CONVERSATION)
    assert len(w.sessions) == 12031
    # traces/README.md: 33.0% of requests extend an earlier prompt.
    assert sum(not s.is_first(0) for s in w.sessions) == 3975


def test_tracelab_rounds_keep_lengths_reuse_tools_and_think_time():
    w = read_tracelab(TRACELAB_ROUNDS)
    rows = [json.loads(line) for line in TRACELAB_ROUNDS.read_text().splitlines()]
    assert [len(s.turns) for s in w.sessions] == [10, 9]
    assert w.prefixes == {"claude-system": 27217, "codex-system": 6912}
    by_session = {}
    for r in rows:
        by_session.setdefault(r["session_id"], []).append(r)
    for session, recorded in zip(w.sessions, by_session.values()):
        recorded.sort(key=lambda r: r["round_index"])
        for turn, r in zip(session.turns, recorded):
            assert (turn.reuse_tokens, turn.new_tokens, turn.output_tokens) == (
                r["prefix_tokens"],
                r["newly_append_tokens"],
                r["output_tokens"],
            )
            assert [(t.name, t.duration_s) for t in turn.tools] == [
                (t["tool_name"], t["tool_wall_latency_ms"] / 1000) for t in r["tools"]
            ]
    first = w.sessions[0]
    assert first.prefix == "claude-system"
    assert [t.start_s for t in first.turns[0].tools] == [0.0, 0.811]  # WebSearch emitted 811 ms after Bash
    assert first.turns[5].think_s == 19.913  # the user came back 19.9 s after round 4's last event
    assert w.sessions[1].turns[1].think_s == 0.0  # round 1 starts when round 0's tool returned


def test_tracelab_context_mode_appends_what_the_prompt_grew_by():
    w = read_tracelab(TRACELAB_ROUNDS, reuse="context")
    second = w.sessions[0].turns[1]
    assert (second.reuse_tokens, second.new_tokens) == (None, 35740 - (32272 + 931))
    shrunk = w.sessions[1].turns[5]  # the recorded prompt is shorter than the context: compaction
    assert (shrunk.reuse_tokens, shrunk.new_tokens) == (9216, 1220)


def test_session_format_round_trips_every_source(tmp_path):
    from agentserve.bench.common.workloads.generator import GeneratorSpec, generate

    rows = [
        {"timestamp": 0, "input_length": 1100, "output_length": 10, "hash_ids": [0, 1, 2]},
        {"timestamp": 9, "input_length": 1600, "output_length": 7, "hash_ids": [0, 1, 3, 4]},
    ]
    workloads = [
        read_mooncake(_jsonl(tmp_path / "m.jsonl", rows)),
        generate(GeneratorSpec(pattern="fanout", teams=2, seed=3)),
        generate(GeneratorSpec(pattern="allgather", teams=1, system_tokens=0, seed=4)),
        read_tracelab(TRACELAB_ROUNDS),
    ]
    for i, w in enumerate(workloads):
        path = write_workload(w, tmp_path / f"w{i}.jsonl")
        assert detect_format(path) == "agentserve"
        assert read_workload(path) == w


def test_session_format_rejects_bad_files(tmp_path):
    with pytest.raises(ValueError, match="header"):
        read_workload(_jsonl(tmp_path / "a.jsonl", [{"format": "other"}]))
    header = {"format": "agentserve-workload", "version": 1, "name": "x"}
    cyclic = [
        header,
        {"id": "a", "turns": [{"new_tokens": 1, "output_tokens": 1, "after": ["b"]}]},
        {"id": "b", "turns": [{"new_tokens": 1, "output_tokens": 1, "after": ["a"]}]},
    ]
    with pytest.raises(ValueError, match="cycle"):
        read_workload(_jsonl(tmp_path / "c.jsonl", cyclic))
    dangling = [header, {"id": "a", "turns": [{"new_tokens": 1, "output_tokens": 1, "after": ["zz#0"]}]}]
    with pytest.raises(ValueError, match="unknown session 'zz'"):
        read_workload(_jsonl(tmp_path / "d.jsonl", dangling))
    with pytest.raises(ValueError, match="cannot tell"):
        detect_format(_jsonl(tmp_path / "e.jsonl", [{"hello": 1}]))
