"""A MoE layer over N ranks: rank loads from a placement, and the layer's time from the slowest rank."""

from __future__ import annotations

import pytest

from agentserve.costmodel.expert_parallel import (
    DEEPSEEK_V3_MOE,
    ExpertParallelCost,
    MoeLayerShape,
    moe_free_decode_s,
    rank_loads,
)
from agentserve.costmodel.gpus import H800, TargetGPU
from agentserve.costmodel.models import DEEPSEEK_V32
from agentserve.costmodel.timing import DEFAULT_DECODE_BANDWIDTH_EFFICIENCY

pytestmark = pytest.mark.unit

GPU = TargetGPU("unit", "unit GPU", hbm_bytes=1 << 30, hbm_bytes_per_s=1e12, dense_flops=1e15)
SHAPE = MoeLayerShape(
    routed_experts=4,
    top_k=2,
    hidden=100,
    expert_intermediate=50,
    moe_layers=1,
    expert_groups=2,
    weight_bytes_per_param=1.0,
    dispatch_bytes_per_copy=100,
    combine_bytes_per_copy=200,
)


def test_a_replicated_expert_splits_its_copies_over_its_replicas():
    # Rank 0 holds experts 0 and 1, rank 1 holds 0 and 2; expert 3 gets no tokens.
    assert rank_loads([10, 4, 6, 0], [0, 1, 0, 2], 2) == [9.0, 11.0]


def test_an_expert_with_tokens_and_no_replica_is_an_error():
    with pytest.raises(ValueError, match="no replica"):
        rank_loads([1, 1], [0, 0], 2)


def test_layer_time_is_the_slowest_ranks_compute_plus_both_all_to_alls():
    cost = ExpertParallelCost(
        SHAPE, GPU, ranks=4, gpus_per_node=2, nic_bytes_per_s=1e9, nvlink_bytes_per_s=1e10, mfu=0.5, latency_s=0.0
    )
    time = cost.layer_time([100, 300, 200, 200], slots_per_rank=1)
    # Experts: 300 copies x 2*3*100*50 FLOPs at 0.5 PFLOP/s = 1.8e-8 s; one expert's 15000 bytes
    # at 0.7 TB/s = 2.14e-8 s, the larger.
    assert time.experts_s == pytest.approx(15000 / 0.7e12)
    # Dispatch: 300 copies, half from the other node over the 1 GB/s NIC (1.5e-5 s), a quarter
    # from the node's other GPU over 10 GB/s NVLink (7.5e-7 s).
    assert time.dispatch_s == pytest.approx(150 * 100 / 1e9)
    assert time.combine_s == pytest.approx(150 * 200 / 1e9)
    assert time.total_s == pytest.approx(time.dispatch_s + time.experts_s + time.combine_s)


def test_only_the_slowest_rank_counts():
    cost = ExpertParallelCost(DEEPSEEK_V3_MOE, GPU, ranks=32, gpus_per_node=8, nic_bytes_per_s=50e9)
    even = cost.layer_time([1024.0] * 32, 9)
    skewed = cost.layer_time([1024.0 * 4] + [1024.0 * 28 / 31] * 31, 9)  # the same copies, one rank hot
    assert skewed == cost.layer_time([1024.0 * 4] * 32, 9)
    assert skewed.experts_s == pytest.approx(4 * cost.experts_s(1024, 0))  # compute-bound at 4096 copies
    assert skewed.total_s > 2 * even.total_s


def test_bad_layouts_are_refused():
    with pytest.raises(ValueError, match="multiple of gpus_per_node"):
        ExpertParallelCost(SHAPE, GPU, ranks=12, gpus_per_node=8, nic_bytes_per_s=1e9)
    with pytest.raises(ValueError, match="expert_groups"):
        MoeLayerShape(routed_experts=10, top_k=2, hidden=1, expert_intermediate=1, moe_layers=1, expert_groups=4)


def test_the_moe_free_step_reads_each_sequence_s_kv_once():
    one = moe_free_decode_s(DEEPSEEK_V32, H800, DEEPSEEK_V3_MOE, [1000])
    two = moe_free_decode_s(DEEPSEEK_V32, H800, DEEPSEEK_V3_MOE, [1000, 3000])
    bandwidth = H800.hbm_bytes_per_s * DEFAULT_DECODE_BANDWIDTH_EFFICIENCY
    assert two - one == pytest.approx(DEEPSEEK_V32.decode_kv_bytes(3000) / bandwidth)
