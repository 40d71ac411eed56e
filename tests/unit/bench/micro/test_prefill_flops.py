import pytest

from agentserve.bench.micro.prefill_flops import attention_flops, linear_flops_per_row, prefill_flops
from agentserve.engine.config import ModelConfig

pytestmark = pytest.mark.unit

CFG = ModelConfig(
    model_type="llama",
    vocab_size=100,
    hidden_size=8,
    intermediate_size=16,
    num_hidden_layers=2,
    num_attention_heads=2,
    num_key_value_heads=1,
    head_dim=4,
)


def test_linear_flops_count_every_projection_of_every_layer():
    # q|k|v 8x(8+8) + o 8x8 + gate|up|down 3x8x16 = 128 + 64 + 384 multiply-adds, x2 layers, x2
    assert linear_flops_per_row(CFG) == 2 * 2 * (128 + 64 + 384)


def test_attention_is_causal_among_new_rows_and_full_over_the_cache():
    # 3 new rows after 5 cached keys: 3*5 + (1+2+3) key visits
    assert attention_flops(CFG, new=3, cached=5) == 2 * 2 * 2 * 2 * 4 * (15 + 6)


def test_prefill_adds_one_lm_head_row():
    assert prefill_flops(CFG, 3, 5) == 3 * linear_flops_per_row(CFG) + attention_flops(CFG, 3, 5) + 2 * 8 * 100
