"""What a prefill costs in arithmetic, so `bench engine` can show the speedup compute allows.

A cached prefill of `new` tokens over `cached` ones does the linears for the new rows only, and
attention from the new rows to every earlier key; a prefill from scratch does both for every row
(causal: row i sees i + 1 keys). Counted as multiply-adds x 2; norms, rotary, softmax and the
sampler are left out (they are a few percent of either side). The LM head runs on the last row
only on both sides, as the engine does.
"""

from __future__ import annotations

from agentserve.engine.config import ModelConfig


def linear_flops_per_row(cfg: ModelConfig) -> int:
    """FLOPs of one token row through every layer's q|k|v, o, gate|up and down projections."""
    q = cfg.num_attention_heads * cfg.head_dim
    kv = 2 * cfg.num_key_value_heads * cfg.head_dim
    per_layer = cfg.hidden_size * (q + kv) + q * cfg.hidden_size + 3 * cfg.hidden_size * cfg.intermediate_size
    return 2 * cfg.num_hidden_layers * per_layer


def attention_flops(cfg: ModelConfig, new: int, cached: int) -> int:
    """FLOPs of q.k and p.v for `new` rows after `cached` keys, causal among the new rows."""
    key_visits = new * cached + new * (new + 1) // 2
    return 2 * 2 * cfg.num_hidden_layers * cfg.num_attention_heads * cfg.head_dim * key_visits


def prefill_flops(cfg: ModelConfig, new: int, cached: int = 0) -> int:
    lm_head = 2 * cfg.hidden_size * cfg.vocab_size
    return new * linear_flops_per_row(cfg) + attention_flops(cfg, new, cached) + lm_head
