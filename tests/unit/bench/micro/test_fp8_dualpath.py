"""bench fp8's emulated DualPath comparison: both sides are bench dualpath's spec, the FP8 side's
engines all started with FP8 KV, its modelled store reads half the full-precision side's."""

import argparse

import pytest

from agentserve.bench.micro.fp8_dualpath import KV_DTYPES, TARGET_MODEL, dualpath_flags
from agentserve.bench.papers.dualpath.cli import bench_spec
from agentserve.bench.papers.dualpath.cli_args import add_arguments
from agentserve.cluster.settings import ComputeSettings

pytestmark = pytest.mark.unit


def test_the_fp8_side_starts_every_engine_with_fp8_kv_and_reads_half_the_bytes(tmp_path):
    parser = argparse.ArgumentParser()
    add_arguments(parser)
    specs = {kv: bench_spec(parser.parse_args(dualpath_flags(4, 4, kv, tmp_path / kv))) for kv in KV_DTYPES}
    full, fp8 = specs["auto"], specs["fp8_e4m3"]
    assert "--kv-dtype" not in full.cluster.compute.engine_args()
    assert fp8.cluster.compute.engine_args()[-2:] == ["--kv-dtype", "fp8_e4m3"]
    assert fp8.cluster.compute.emulation.target_model == TARGET_MODEL
    assert (full.regime["kv_dtype"], fp8.regime["kv_dtype"]) == KV_DTYPES
    assert fp8.policies == full.policies == ("baseline", "dualpath") and fp8.online is None
    assert (fp8.workload.agents, fp8.workload.turns, fp8.workload.final_context) == (4, 4, 20480 + 3 * 423)
    # qwen2.5-32b's KV: 262,144 bytes a token in bf16, 131,584 in FP8 with its row scales.
    reads = [s.storage_modelled["later_turn"]["read_over_compute"] for s in (full, fp8)]
    assert reads[1] / reads[0] == pytest.approx(131_584 / 262_144, rel=0.01)


def test_real_engines_take_the_kv_dtype_flag_too():
    assert ComputeSettings(kv_dtype="fp8_e4m3").engine_args() == ["--kv-dtype", "fp8_e4m3"]
    with pytest.raises(ValueError, match="kv_dtype"):
        ComputeSettings(kv_dtype="int4")  # type: ignore[arg-type]
