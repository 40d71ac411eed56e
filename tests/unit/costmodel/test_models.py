"""Target models: KV bytes per token from their configs, prefill FLOPs in closed form, the
cache-compute ratio of DualPath's DeepSeek-V3.2 turn."""

from __future__ import annotations

import pytest

from agentserve.costmodel.models import DEEPSEEK_V32, DENSE_27B, QWEN25_32B, TargetModel, target_model
from agentserve.costmodel.ratio import PAPER_TURN, TurnShape, cache_compute_ratio

pytestmark = pytest.mark.unit


def test_kv_bytes_per_token_follow_the_configs():
    assert DEEPSEEK_V32.kv_bytes_per_token == 61 * (656 + 132) == 48_068
    assert QWEN25_32B.kv_bytes_per_token == 64 * 2 * 8 * 128 * 2 == 262_144
    assert DENSE_27B.kv_bytes_per_token == 62 * 2 * 16 * 128 * 2 == 507_904


def test_dense_prefill_flops_count_every_earlier_key():
    model = TargetModel("m", "", layers=2, kv_bytes_per_token_per_layer=1, active_params=10, attention_flops_per_key=3)
    # 4 new tokens after 5 cached see 6, 7, 8, 9 keys.
    assert model.prefill_flops(cached_tokens=5, new_tokens=4) == 2 * 10 * 4 + 2 * 3 * (6 + 7 + 8 + 9)


def test_sparse_prefill_flops_cap_attended_keys_but_not_the_indexer():
    model = TargetModel(
        "s",
        "",
        layers=1,
        kv_bytes_per_token_per_layer=1,
        active_params=1,
        attention_flops_per_key=1,
        attended_keys_cap=7,
        indexer_flops_per_key=100,
    )
    # Keys seen 6, 7, 8, 9; attended min(., 7) = 6, 7, 7, 7.
    assert model.prefill_flops(5, 4) == 2 * 4 + (6 + 7 + 7 + 7) + 100 * (6 + 7 + 8 + 9)
    assert model.prefill_flops(0, 3) == 2 * 3 + (1 + 2 + 3) + 100 * (1 + 2 + 3)


def test_deepseek_v32_ratio_is_the_papers_order_of_magnitude():
    ratio = cache_compute_ratio(DEEPSEEK_V32, PAPER_TURN)
    assert (PAPER_TURN.cached_tokens, round(PAPER_TURN.hit_ratio, 4)) == (32_271, 0.9869)
    assert ratio.kv_bytes_loaded == 32_271 * 48_068
    linear = 2 * 37e9 * 429
    attention = 61 * 128 * (2 * 576 + 2 * 512) * 2048 * 429
    indexer = 61 * 64 * 2 * 128 * (429 * 32_271 + 429 * 430 // 2)
    assert ratio.prefill_flops == linear + attention + indexer
    assert ratio.to_dict()["cache_compute_gb_per_pflop"] == 25.6  # paper: ~22
    assert round(cache_compute_ratio(QWEN25_32B, PAPER_TURN).gb_per_pflop, 2) == 188.56
    assert round(cache_compute_ratio(DENSE_27B, PAPER_TURN).gb_per_pflop, 2) == 439.16


def test_turn_shapes_and_bad_input():
    assert TurnShape.from_hit_ratio(32_700, 0.987) == TurnShape(32_700, 425)
    assert TurnShape.from_hit_ratio(10, 0.0) == TurnShape(10, 10)
    with pytest.raises(ValueError, match="new_tokens must be in 1..context_tokens"):
        TurnShape(100, 101)
    with pytest.raises(ValueError, match="hit_ratio must be in"):
        TurnShape.from_hit_ratio(100, 1.0)
    with pytest.raises(ValueError, match="unknown target model 'gpt'; choose one of deepseek-v3.2, dense-27b"):
        target_model("gpt")
    with pytest.raises(ValueError, match="attended_keys_cap must be positive"):
        TargetModel("x", "", 1, 1, 1.0, 1, attended_keys_cap=0)
