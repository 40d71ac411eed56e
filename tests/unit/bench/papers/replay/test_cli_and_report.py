"""CLI wiring of bench replay/capacity and workload convert/generate; reports on disk."""

import asyncio
import json
from pathlib import Path

import pytest

from agentserve.bench.common.workloads.generator import GeneratorSpec, generate
from agentserve.bench.common.workloads.session_format import read_workload
from agentserve.bench.papers.replay.capacity import binding_term
from agentserve.bench.papers.replay.cli import write_capacity
from agentserve.bench.papers.replay.records import TurnRecord
from agentserve.bench.papers.replay.replayer import Replayer, ReplayOptions
from agentserve.bench.papers.replay.report import write_replay
from agentserve.bench.papers.replay.slo import SLO
from agentserve.bench.papers.replay.summary import summarize
from agentserve.cli import commands
from agentserve.cli.main import build_parser, main
from tests.support.golden import matches_golden
from tests.unit.bench.papers.replay.fake_serving import FakeServing

pytestmark = pytest.mark.unit

GOLDEN_CAPACITY = Path(__file__).parent / "golden" / "capacity.md"


def test_bench_replay_and_capacity_parse():
    args = build_parser().parse_args(
        [
            "bench",
            "replay",
            "--workload",
            "w.jsonl",
            "--max-sessions",
            "200",
            "--speedup",
            "2",
            "--concurrency",
            "4",
            "--json",
            "--metrics",
            "kvstore=http://127.0.0.1:9/metrics",
        ]
    )
    assert (
        args.func,
        args.workload,
        args.max_sessions,
        args.speedup,
        args.concurrency,
        args.rate,
        args.token_scale,
        args.metrics,
        args.target,
    ) == (commands.bench_replay, Path("w.jsonl"), 200, 2.0, 4, None, None, ["kvstore=http://127.0.0.1:9/metrics"], None)
    args = build_parser().parse_args(
        [
            "bench",
            "capacity",
            "--workload",
            "w.jsonl",
            "--slo",
            "ttft_p90=1000ms",
            "--load",
            "rate",
            "--start",
            "0.5",
            "--address",
            "127.0.0.1:1",
        ]
    )
    assert (args.func, args.load, args.start, args.tolerance, args.address) == (
        commands.bench_capacity,
        "rate",
        0.5,
        0.05,
        "127.0.0.1:1",
    )
    with pytest.raises(SystemExit):
        build_parser().parse_args(["bench", "replay", "--workload", "w", "--rate", "1", "--concurrency", "2"])


def test_workload_generate_and_convert_write_the_session_format(tmp_path, capsys):
    out = tmp_path / "gen.jsonl"
    assert (
        main(
            [
                "workload",
                "generate",
                "--out",
                str(out),
                "--pattern",
                "allgather",
                "--teams",
                "2",
                "--agents",
                "2",
                "--turns",
                "3",
                "--json",
            ]
        )
        == 0
    )
    described = json.loads(capsys.readouterr().out)
    assert (described["sessions"], described["turns"]) == (4, 12)
    assert read_workload(out).num_turns == 12
    mooncake = tmp_path / "m.jsonl"
    record = {"timestamp": 0, "input_length": 600, "output_length": 3, "hash_ids": [1, 2]}
    mooncake.write_text(json.dumps(record) + "\n")
    assert main(["workload", "convert", str(mooncake), "--out", str(tmp_path / "c.jsonl"), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["turns"] == 1
    assert main(["bench", "replay", "--workload", str(tmp_path / "none.jsonl")]) == 2
    assert "workload file not found" in capsys.readouterr().err


def test_replay_report_files_and_markdown(tmp_path):
    w = generate(
        GeneratorSpec(
            pattern="fanout",
            teams=1,
            agents=2,
            turns=2,
            system_tokens=32,
            first_tokens=20,
            new_tokens=10,
            output_tokens=4,
            tool_prob=0.5,
            tool_time="const:0.01",
            seed=5,
        )
    )
    replayer = Replayer(w, FakeServing(), ReplayOptions())
    result = asyncio.run(replayer.run())
    summary = summarize(result.turns, result.sessions, result.duration_s, SLO.parse("ttft_p90=1000ms"))
    summary.update(
        workload={"name": w.name, "source": w.source, "sessions": 3, "turns": w.num_turns, "token_scale": 16},
        run={"load_model": "recorded", "speedup": 1.0, "rate": None, "concurrency": None, "target": "fake"},
        kv_bytes_by_path=None,
        kv_bytes={"reason": "no source", "timeline": None, "source": None},
        nic_utilization={"per_nic": None, "reason": "not exported"},
        hit_ratio_by_tier=None,
        hit_ratio_by_tier_note="no kvstore",
    )
    files = write_replay(summary, result.turns, tmp_path)
    assert Path(files["latency_cdf"]).stat().st_size > 10_000 and "kv_bytes" not in files
    saved = json.loads((tmp_path / "summary.json").read_text())
    for key in (
        "turns_total",
        "turns_failed",
        "ttft_p90_first_turn_ms",
        "ttft_p90_later_turns_ms",
        "tpot_p90_ms",
        "hit_ratio",
        "kv_bytes_by_path",
        "goodput",
    ):
        assert key in saved
    md = (tmp_path / "summary.md").read_text()
    assert "| ttft | later turns |" in md and "Not available: no source." in md and "token scale: 1/16" in md
    assert len((tmp_path / "turns.jsonl").read_text().splitlines()) == w.num_turns


def test_capacity_report(tmp_path):
    # First turns' TTFT grows 100 ms per unit of load, later turns' 120 ms: the later-turn bound
    # (500 ms) is crossed first, at load 5, while the first-turn bound (1000 ms) still holds.
    slo = SLO.parse("ttft_first_p90=1000ms,ttft_later_p90=500ms,tpot_p90=50ms")

    def turns(x: float) -> list[TurnRecord]:
        out = []
        for i in range(10):
            ttft = (100.0 if i < 5 else 120.0) * x / 1000
            out.append(TurnRecord("s", i, i < 5, 0.0, output_tokens=3, first_token_s=ttft, last_token_s=ttft + 0.02))
        return out

    probes = []
    for x in (1, 2, 4, 8, 6, 5):
        records = turns(x)
        probes.append(
            {
                "load": x,
                "attainment": slo.attained(records),
                "goodput_turns_per_s": slo.attained(records) * x / 2,
                "turns_per_s": x / 2,
                "turns_total": 10,
                "turns_failed": 0,
                "engines": {},
                "slo_check": slo.check(records).to_json(),
            }
        )
    binding = binding_term(probes, 4, 5)
    assert binding is not None
    assert (binding["term"], binding["load"], binding["terms_failed"]) == ("ttft_later_p90", 5, ["ttft_later_p90"])
    assert binding["value_ms"] == pytest.approx(600.0)
    result = {
        "workload": {"name": "w", "source": "s", "sessions": 1, "turns": 1, "token_scale": 16},
        "slo": slo.to_json(),
        "load": "concurrency",
        "capacity": 4,
        "lowest_failing_load": 5,
        "converged": True,
        "binding": binding,
        "per_engine": {"decode": {"engines": ["d0", "d1"], "capacity_per_engine": 2.0}},
        "probes": probes,
    }
    write_capacity(result, tmp_path)
    assert (tmp_path / "capacity.png").stat().st_size > 10_000
    assert matches_golden((tmp_path / "capacity.md").read_text(), GOLDEN_CAPACITY)
    # With no failing probe the term nearest its bound at the capacity binds.
    assert binding_term(probes[:3], 4, None)["term"] == "ttft_later_p90"  # 480 of 500 ms
