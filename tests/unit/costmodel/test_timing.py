"""The emulated engine's clock: prefill and decode times of a target model on a target GPU, and the
KV blocks the GPU holds after its weights, each against its closed form."""

from __future__ import annotations

import pytest

from agentserve.costmodel.gpus import GIB, H800, TargetGPU, target_gpu
from agentserve.costmodel.kv_capacity import kv_capacity_blocks
from agentserve.costmodel.models import DEEPSEEK_V32, DENSE_27B, QWEN25_32B, TargetModel
from agentserve.costmodel.ratio import PAPER_TURN
from agentserve.costmodel.timing import ComputeCost

pytestmark = pytest.mark.unit

GPU = TargetGPU("g", "", hbm_bytes=1000, hbm_bytes_per_s=100.0, dense_flops=1000.0)
MODEL = TargetModel(
    "m", "", layers=2, kv_bytes_per_token_per_layer=5, active_params=10, attention_flops_per_key=3, total_params=40
)


def test_prefill_time_is_flops_over_the_stated_share_of_peak():
    cost = ComputeCost(MODEL, GPU, prefill_mfu=0.5)
    # 4 new after 5 cached: 2*10*4 + 2*3*(6+7+8+9) = 260 FLOPs at 500 FLOP/s.
    assert cost.prefill_s(5, 4) == 260 / 500


def test_decode_step_reads_the_weight_shard_and_each_sequences_kv():
    cost = ComputeCost(MODEL, GPU, decode_bandwidth_efficiency=0.5, weight_shards=4)
    # weights 40 params * 2 B / 4 GPUs = 20 B; KV 2 layers * 5 B * (3 + 7) tokens = 100 B; 50 B/s.
    assert cost.weight_bytes_per_gpu == 20
    assert cost.decode_step_s([3, 7]) == (20 + 100) / 50
    # Compute-bound when the batch is large: 2 * 10 * B FLOPs at 1000 * 0.4 FLOP/s.
    wide = ComputeCost(MODEL, TargetGPU("w", "", 1000, hbm_bytes_per_s=1e9, dense_flops=1000.0))
    assert wide.decode_step_s([1] * 8) == 2 * 10 * 8 / 400


def test_sparse_decode_reads_topk_attention_kv_and_all_indexer_kv():
    # DeepSeek-V3.2 at 32.7K: 656 B of MLA KV for the top 2048 keys, 132 B of indexer keys for all.
    assert DEEPSEEK_V32.decode_kv_bytes(32_700) == 61 * (656 * 2048 + 132 * 32_700)
    assert DEEPSEEK_V32.decode_kv_bytes(1000) == 61 * 788 * 1000
    assert QWEN25_32B.decode_kv_bytes(10) == QWEN25_32B.kv_bytes_per_token * 10


def test_deepseek_on_h800_at_the_papers_turn():
    cost = ComputeCost(DEEPSEEK_V32, H800)
    flops = DEEPSEEK_V32.prefill_flops(PAPER_TURN.cached_tokens, PAPER_TURN.new_tokens)
    assert cost.prefill_s(PAPER_TURN.cached_tokens, PAPER_TURN.new_tokens) == flops / (989e12 * 0.4)
    assert round(cost.prefill_s(PAPER_TURN.cached_tokens, PAPER_TURN.new_tokens), 4) == 0.1532
    weights = 671e9 / 32  # FP8, EP32
    assert cost.decode_step_s([32_700] * 32) == (weights + 32 * DEEPSEEK_V32.decode_kv_bytes(32_700)) / (3.35e12 * 0.7)
    assert round(cost.decode_step_s([32_700] * 32) * 1000, 2) == 13.65  # ms


def test_kv_capacity_is_hbm_less_weights_and_reserve_over_block_bytes():
    cost = ComputeCost(MODEL, GPU, weight_shards=4)
    # (1000 - 20 - 0.1 * 1000) // (2 * 5 * 4) = 880 // 40
    assert kv_capacity_blocks(cost, block_size=4) == 22
    assert kv_capacity_blocks(cost, block_size=4, activation_reserve=0.0) == 980 // 40
    h800 = ComputeCost(DEEPSEEK_V32, H800)
    assert kv_capacity_blocks(h800, 16) == int((80 * GIB - 671e9 / 32 - 8 * GIB) // (48_068 * 16)) == 73_256
    assert kv_capacity_blocks(ComputeCost(DENSE_27B, H800), 16) == 2868  # 54 GB of BF16 weights on one GPU


def test_bad_settings_name_what_is_wrong():
    with pytest.raises(ValueError, match="prefill_mfu must be in"):
        ComputeCost(MODEL, GPU, prefill_mfu=0)
    with pytest.raises(ValueError, match="decode_bandwidth_efficiency must be in"):
        ComputeCost(MODEL, GPU, decode_bandwidth_efficiency=1.5)
    with pytest.raises(ValueError, match="weight_shards must be >= 0"):
        ComputeCost(MODEL, GPU, weight_shards=-1)
    with pytest.raises(ValueError, match="no room for one KV block.*weight_shards"):
        kv_capacity_blocks(ComputeCost(DEEPSEEK_V32, H800, weight_shards=8), 16)
    with pytest.raises(ValueError, match="unknown target GPU 'a100'; choose one of h800, h100, h200"):
        target_gpu("a100")
    with pytest.raises(ValueError, match="activation_reserve must be in"):
        kv_capacity_blocks(ComputeCost(MODEL, GPU), 4, activation_reserve=1.0)
