"""FP8 KV in the cost model and the simulator: a BF16 KV's bytes halve (plus the row scales), a KV
that is FP8 already keeps its bytes, and the simulator charges what its `kv_dtype` stores."""

from __future__ import annotations

import pytest

from agentserve.costmodel.models import DEEPSEEK_V32, QWEN25_32B
from agentserve.sim.config import SimConfig

pytestmark = pytest.mark.unit


def test_fp8_halves_a_bf16_kv_plus_row_scales():
    fp8 = QWEN25_32B.with_kv_dtype("fp8_e4m3")
    assert fp8.kv_bytes_per_token == 64 * (2 * 8 * 128 + 2 * 4) == 131_584
    assert fp8.kv_fp8 and fp8.with_kv_dtype("fp8_e4m3") is fp8
    assert QWEN25_32B.with_kv_dtype("auto") is QWEN25_32B


def test_a_kv_stored_as_fp8_already_keeps_its_bytes():
    assert DEEPSEEK_V32.with_kv_dtype("fp8_e4m3").kv_bytes_per_token == 48_068


def test_the_simulator_charges_fp8_bytes_and_holds_more_blocks():
    full = SimConfig(model="qwen2.5-32b")
    fp8 = SimConfig(model="qwen2.5-32b", kv_dtype="fp8_e4m3")
    assert (full.kv_bytes_per_token, fp8.kv_bytes_per_token) == (262_144, 131_584)
    assert fp8.cost().model.kv_bytes_per_token == 131_584
    assert fp8.pool_blocks("decode") > 1.9 * full.pool_blocks("decode")
    assert fp8.to_dict()["kv_dtype"] == "fp8_e4m3"


def test_a_bad_kv_dtype_names_the_setting():
    with pytest.raises(ValueError, match="sim kv_dtype must be one of auto, fp8_e4m3, got 'fp16'"):
        SimConfig(kv_dtype="fp16")  # type: ignore[arg-type]
