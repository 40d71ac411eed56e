"""The kvstore bench commands, run briefly through the CLI: their JSON and the bounds they show."""

import itertools
import json

import pytest

from agentserve.cli.main import main
from tests.support.traces import MOONCAKE_CONVERSATION

pytestmark = pytest.mark.integration


def run_cli(capsys, *argv: str) -> dict:
    assert main(list(argv)) == 0
    return json.loads(capsys.readouterr().out)


def test_soak_stays_within_budgets_and_keeps_serving(capsys, tmp_path):
    result = run_cli(
        capsys,
        "bench",
        "kvstore-soak",
        "--minutes",
        "0.07",
        "--dram-mb",
        "1",
        "--ssd-mb",
        "4",
        "--data-dir",
        str(tmp_path),
        "--json",
    )
    assert result["within_budget"] is True, result
    assert result["dram"]["max_bytes"] <= 1 << 20 and result["ssd"]["max_bytes"] <= 4 << 20
    assert result["ssd"]["max_bytes_on_disk_sampled"] <= 4 << 20
    assert result["ssd"]["evictions"] > 0 and result["dram"]["evictions"] > 0
    assert (result["errors"], result["wrong_bytes"], result["first_error"]) == (0, 0, "")
    assert result["read_hits"] > 0 and result["layer_reads"] > 0 and result["writes"] > 0


def test_trace_replay_matches_an_exact_lru(capsys, tmp_path):
    trace = tmp_path / "head.jsonl"
    with open(MOONCAKE_CONVERSATION) as f:
        trace.write_text("".join(itertools.islice(f, 600)))
    result = run_cli(
        capsys,
        "bench",
        "kvstore-trace",
        "--trace",
        str(trace),
        "--block-tokens",
        "512",
        "--capacity-blocks",
        "1000,3000",
        "--data-dir",
        str(tmp_path),
        "--json",
    )
    assert result["requests"] == 600 and [r["capacity_blocks"] for r in result["runs"]] == [1000, 3000]
    for run in result["runs"]:
        assert run["difference"] <= 0.01, run
        assert run["ssd_max_blocks_seen"] <= run["capacity_blocks"]
    assert result["runs"][0]["hit_ratio"] < result["runs"][1]["hit_ratio"]


def test_trace_rejects_a_block_size_the_trace_cannot_express(capsys, tmp_path):
    trace = tmp_path / "t.jsonl"
    trace.write_text('{"timestamp": 0, "input_length": 600, "output_length": 1, "hash_ids": [1, 2]}\n')
    assert (
        main(["bench", "kvstore-trace", "--trace", str(trace), "--block-tokens", "384", "--capacity-blocks", "10"]) == 2
    )
    assert "must divide 512" in capsys.readouterr().err
    assert (
        run_cli(
            capsys,
            "bench",
            "kvstore-trace",
            "--trace",
            str(trace),
            "--block-tokens",
            "256",
            "--capacity-blocks",
            "10",
            "--data-dir",
            str(tmp_path),
            "--json",
        )["blocks_accessed"]
        == 3
    )


def test_throughput_bench_reports_every_size_and_the_ratios(capsys, tmp_path):
    result = run_cli(
        capsys,
        "bench",
        "kvstore",
        "--mb-per-size",
        "2",
        "--raw-mb",
        "8",
        "--sizes",
        "64KB,1MB",
        "--passes",
        "2",
        "--data-dir",
        str(tmp_path),
        "--json",
    )
    assert result["raw_disk_read_MBps"] > 0
    for key in (
        "cold_read_vs_raw_1MB",
        "grpc_vs_inprocess_read_1MB",
        "grpc_vs_inprocess_read_1MB_warm",
        "grpc_dram_vs_inprocess_read_1MB",
    ):
        assert result[key] > 0
    passes = result["passes_1MB"]
    assert len(passes) == 2 and all(
        p["raw_sequential_MBps"] > 0 and p["grpc_cold_MBps"] > 0 and p["grpc_dram_MBps"] > 0 for p in passes
    )
    assert (
        min(p["cold_read_vs_raw"] for p in passes)
        <= result["cold_read_vs_raw_1MB"]
        <= max(p["cold_read_vs_raw"] for p in passes)
    )  # the headline ratio is their median
    for size in ("64KB", "1MB"):
        for mode in ("write_fsync_each", "write_group_commit", "read_cold", "read_warm", "read_dram"):
            assert {"MBps", "p50_ms", "p99_ms"} <= set(result["sizes"][size][mode])
    assert {"grpc_read_cold", "grpc_read_warm"} <= set(result["sizes"]["1MB"])


def test_disk_patterns_reads_every_pattern_and_reports_medians(capsys, tmp_path):
    result = run_cli(
        capsys, "bench", "disk-patterns", "--mb", "16", "--passes", "2", "--data-dir", str(tmp_path), "--json"
    )
    patterns = {
        "sequential_1MB",
        "sequential_16MB",
        "streams_contiguous_1MB",
        "threads_interleaved_1MB",
        "threads_interleaved_4MB",
        "block_files_1MB",
    }
    assert len(result["passes"]) == 2 and all(set(p) == patterns for p in result["passes"])
    assert all(v > 0 for v in result["median_MBps"].values()) and set(result["vs_sequential"]) == patterns
    assert max(result["vs_sequential"]["sequential_1MB"], result["vs_sequential"]["sequential_16MB"]) == 1.0
    assert list(tmp_path.iterdir()) == []  # its files are gone
    assert main(["bench", "disk-patterns", "--mb", "8"]) == 2 and "at least 16" in capsys.readouterr().err
