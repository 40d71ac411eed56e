"""bench eplb: the load sources' exact mapping, and the replay's figures on a small case."""

from __future__ import annotations

import dataclasses
import json

import pytest

from agentserve.bench.micro.eplb import EplbConfig, markdown, run
from agentserve.bench.micro.eplb_loads import Recording, recorded_windows, serve_placement, zipf_windows
from agentserve.engine.expert_load import RECORD_FORMAT

pytestmark = pytest.mark.unit


def _recording(path, forwards):
    header = {"format": RECORD_FORMAT, "layers": [0, 1], "num_experts": 2, "top_k": 1}
    lines = [header] + [{"forward": i, "counts": c} for i, c in enumerate(forwards)]
    path.write_text("".join(json.dumps(line) + "\n" for line in lines))
    return path


def test_recorded_windows_sum_forwards_until_the_copies_and_split_each_expert_over_its_targets(tmp_path):
    forwards = [[[3, 1], [0, 4]], [[1, 1], [2, 2]], [[5, 0], [1, 1]], [[1, 0], [1, 0]]]
    recording = Recording.read(_recording(tmp_path / "loads.jsonl", forwards))
    # Layer 0 routes 4, 2, 5, 1 copies: windows of at least 6 copies take forwards 0-1 and 2-3.
    windows = recorded_windows(recording, window_copies=6, target_experts=4, target_layers=3, seed=1)
    assert len(windows) == 2
    # Window 0, recorded layer 0 sums to [4, 2]: each recorded expert is two target experts of half its load.
    assert sorted(windows[0][0]) == [1.0, 1.0, 2.0, 2.0]
    assert sorted(windows[0][1]) == [1.0, 1.0, 3.0, 3.0]
    assert sorted(windows[0][2]) == sorted(windows[0][0])  # target layer 2 replays recorded layer 0
    assert sorted(windows[1][0]) == [0.0, 0.0, 3.0, 3.0]


def test_a_recording_without_forwards_is_refused(tmp_path):
    with pytest.raises(ValueError, match="no forward"):
        Recording.read(_recording(tmp_path / "loads.jsonl", []))


def test_zipf_windows_hold_the_copies_with_the_zipf_shares():
    windows = zipf_windows(experts=8, layers=2, windows=3, exponent=1.0, copies_per_window=100.0, seed=0)
    assert len(windows) == 3 and len(windows[0]) == 2
    harmonic = sum(1 / r for r in range(1, 9))
    assert sorted(windows[0][0], reverse=True) == pytest.approx([100 / r / harmonic for r in range(1, 9)])


def test_eplb_beats_the_static_placement_on_zipf_loads(tmp_path):
    result = run(EplbConfig(ranks=(32,), zipf_windows=3, steps_per_window=1))
    zipf = result["cases"]["zipf"]["32"]
    assert zipf["slots_per_rank_eplb"] == 9
    assert zipf["max_over_mean_rank_load"] < zipf["max_over_mean_rank_load_without_eplb"]
    assert zipf["moe_layer_time_ratio"] < 1
    assert zipf["tpot_ms"]["p99"] < zipf["tpot_ms_without_eplb"]["p99"]
    assert "| zipf | 32 |" in markdown(result)


def test_emulated_decode_engines_time_each_replayed_step_with_and_without_eplb(tiny_model_dir):
    small = EplbConfig(ranks=(32,), zipf_windows=2, steps_per_window=3, decode_batch=4, decode_context=64)
    result = run(dataclasses.replace(small, emulated_vocabulary=tiny_model_dir, time_dilation=0.05))
    zipf = result["cases"]["zipf"]["32"]
    # One scored window of 3 steps: 3 gaps between full-batch steps on each engine.
    assert zipf["tpot_ms_emulated"]["count"] == zipf["tpot_ms_emulated_without_eplb"]["count"] == 3
    assert zipf["tpot_p99_ratio_emulated"] > 0
    assert "tpot_emulated" in result["regime"]
    assert "| emulated TPOT p99 ms, EPLB |" in markdown(result)


def test_the_recorded_model_s_placement_gives_each_layer_s_hot_expert_the_spare(tmp_path):
    recording = Recording.read(_recording(tmp_path / "loads.jsonl", [[[6, 1], [1, 2]], [[3, 0], [0, 5]]]))
    placement = serve_placement(recording, ranks=2, redundant_per_rank=1)
    assert (placement.ranks, placement.layers, placement.slots_per_rank) == (2, (0, 1), 2)
    assert [sorted(slots) for slots in placement.slots] == [[0, 0, 0, 1], [0, 1, 1, 1]]
    with pytest.raises(ValueError, match="placement ranks"):
        serve_placement(recording, ranks=3, redundant_per_rank=1)
