"""ClusterSpec: every policy's cluster settings as typed fields, checked once, and the engine flags
each role gets from them."""

from __future__ import annotations

import pytest

from agentserve.bench.common.cluster import ClusterSpec
from agentserve.cluster.settings import ComputeSettings
from agentserve.costmodel.kv_capacity import kv_capacity_blocks
from agentserve.engine.emulation_config import EmulationConfig

pytestmark = pytest.mark.unit

EMULATED = ComputeSettings("emulated", EmulationConfig(time_dilation=2.0))


def test_each_role_gets_its_pool_and_the_prefill_its_load_order():
    spec = ClusterSpec(block_size=64, compute=EMULATED, prefill_kv_blocks=100, decode_kv_blocks=300, load_order="fifo")
    assert spec.engine_flags("prefill") == {"block_size": 64, "kv_blocks": 100, "load_order": "fifo"}
    assert spec.engine_flags("decode") == {"block_size": 64, "kv_blocks": 300}
    assert spec.emulation("decode") == EmulationConfig(time_dilation=2.0, kv_blocks=300)


def test_real_compute_passes_no_pool():
    spec = ClusterSpec(block_size=64, prefill_kv_blocks=100)
    assert spec.engine_flags("prefill") == {"block_size": 64, "load_order": "concurrent"}
    assert spec.to_dict()["compute"] == "real" and spec.to_dict()["emulation"] is None


def test_a_pool_the_target_cannot_hold_fails_at_construction():
    capacity = kv_capacity_blocks(EMULATED.emulation.cost(), 256)
    assert ClusterSpec(compute=EMULATED, decode_kv_blocks=capacity).decode_kv_blocks == capacity
    with pytest.raises(ValueError, match=f"kv_blocks {capacity + 1} is more than h800 holds for deepseek-v3.2"):
        ClusterSpec(compute=EMULATED, decode_kv_blocks=capacity + 1)


def test_choices_are_refused_with_the_settings_message():
    with pytest.raises(ValueError, match="load_order must be one of fifo, concurrent, got 'lifo'"):
        ClusterSpec(load_order="lifo")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="turn_order must be one of arrival, least-served, got 'fair'"):
        ClusterSpec(turn_order="fair")  # type: ignore[arg-type]
