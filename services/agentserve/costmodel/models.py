"""Target models: the KV bytes a token stores and the FLOPs a new token costs, from published configs.

A turn's prefill computes its new tokens; each new token costs

    2 * active_params                                 (every matmul weight used once, multiply + add)
  + layers * attention_flops_per_key * attended keys  (QK^T and PV over the context before it)
  + layers * indexer_flops_per_key * context keys     (DeepSeek Sparse Attention's indexer only)

where a dense model attends to every earlier token and DSA to at most `attended_keys_cap`. Norms,
softmax, routing and the LM head are left out: each is under 1% of these terms at long context.

A decode step of one sequence whose context (itself included) is c tokens reads

    layers * (attention KV bytes per token * min(c, attended_keys_cap) + indexer KV bytes per token * c)

of KV from HBM, besides the weights (`weight_bytes`; see agentserve.costmodel.timing).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Literal

# How KV is stored (`EngineConfig.kv_dtype`). auto: as the model's `kv_bytes_per_token_per_layer`
# states; fp8_e4m3: one byte a value plus a float32 scale per token row of K and of V (`kv.fp8`).
KVDtype = Literal["auto", "fp8_e4m3"]
FP8_ROW_SCALE_BYTES = 2 * 4  # K's and V's float32 scale, per token and layer


@dataclass(frozen=True)
class TargetModel:
    key: str  # how profiles and the CLI name it
    description: str
    layers: int
    kv_bytes_per_token_per_layer: int  # what the store keeps for one token of one layer
    active_params: float  # weights one token passes through (MoE: the activated experts)
    attention_flops_per_key: int  # per new token, per attended key, per layer
    attended_keys_cap: int | None = None  # sparse attention's top-k; None = every earlier token
    indexer_flops_per_key: int = 0  # per new token, per context key, per layer
    total_params: float = 0.0  # every weight stored (MoE: all experts); 0 = active_params (dense)
    weight_bytes_per_param: float = 2.0  # BF16; FP8 checkpoints 1
    indexer_kv_bytes_per_token_per_layer: int = 0  # the part of the KV every decode step reads in full
    weight_shards: int = 1  # GPUs one replica's weights are spread over in the reference deployment
    max_context: int = 131_072  # tokens
    kv_fp8: bool = False  # the stated KV bytes are already FP8 (a BF16 KV otherwise)

    def __post_init__(self) -> None:
        if self.layers <= 0 or self.kv_bytes_per_token_per_layer <= 0:
            raise ValueError(f"model {self.key}: layers and kv_bytes_per_token_per_layer must be positive")
        if self.active_params <= 0 or self.attention_flops_per_key <= 0:
            raise ValueError(f"model {self.key}: active_params and attention_flops_per_key must be positive")
        if self.attended_keys_cap is not None and self.attended_keys_cap <= 0:
            raise ValueError(f"model {self.key}: attended_keys_cap must be positive (or None for dense)")
        if self.indexer_flops_per_key < 0:
            raise ValueError(f"model {self.key}: indexer_flops_per_key must be >= 0")
        if self.total_params < 0 or self.weight_bytes_per_param <= 0:
            raise ValueError(f"model {self.key}: total_params must be >= 0 and weight_bytes_per_param positive")
        if not 0 <= self.indexer_kv_bytes_per_token_per_layer <= self.kv_bytes_per_token_per_layer:
            raise ValueError(f"model {self.key}: indexer_kv_bytes_per_token_per_layer must be in [0, kv bytes]")
        if self.weight_shards <= 0 or self.max_context <= 0:
            raise ValueError(f"model {self.key}: weight_shards and max_context must be positive")

    @property
    def kv_bytes_per_token(self) -> int:
        return self.layers * self.kv_bytes_per_token_per_layer

    def with_kv_dtype(self, kv_dtype: KVDtype) -> TargetModel:
        """This model with its KV held as `kv_dtype`: FP8 halves a BF16 KV's bytes, plus the row
        scales; a KV that is FP8 already (or `auto`) keeps its bytes."""
        if kv_dtype == "auto" or self.kv_fp8:
            return self
        if kv_dtype != "fp8_e4m3":
            raise ValueError(f"kv_dtype must be one of auto, fp8_e4m3, got {kv_dtype!r}")
        per_layer = self.kv_bytes_per_token_per_layer // 2 + FP8_ROW_SCALE_BYTES
        return replace(self, kv_bytes_per_token_per_layer=per_layer, kv_fp8=True)

    @property
    def weight_bytes(self) -> float:
        """Bytes of every stored weight of one replica."""
        return (self.total_params or self.active_params) * self.weight_bytes_per_param

    def decode_kv_bytes(self, context_tokens: int) -> float:
        """KV bytes one decode step of a sequence with `context_tokens` (itself included) reads."""
        if context_tokens < 0:
            raise ValueError(f"context_tokens must be >= 0, got {context_tokens}")
        indexer = self.indexer_kv_bytes_per_token_per_layer
        attended = context_tokens if self.attended_keys_cap is None else min(context_tokens, self.attended_keys_cap)
        return self.layers * ((self.kv_bytes_per_token_per_layer - indexer) * attended + indexer * context_tokens)

    def prefill_flops(self, cached_tokens: int, new_tokens: int) -> float:
        """FLOPs to compute `new_tokens` after `cached_tokens` whose KV is loaded, causally."""
        if cached_tokens < 0 or new_tokens < 0:
            raise ValueError(f"token counts must be >= 0, got cached {cached_tokens}, new {new_tokens}")
        every_key = _keys_seen(cached_tokens, new_tokens, cap=None)
        attended = _keys_seen(cached_tokens, new_tokens, cap=self.attended_keys_cap)
        return (
            2 * self.active_params * new_tokens
            + self.layers * self.attention_flops_per_key * attended
            + self.layers * self.indexer_flops_per_key * every_key
        )


def _keys_seen(cached: int, new: int, cap: int | None) -> int:
    """Sum over the new tokens at positions cached+1 .. cached+new of min(position, cap): the keys
    each attends to, itself included."""
    dense_sum = new * cached + new * (new + 1) // 2
    if cap is None or cap >= cached + new:
        return dense_sum
    under_cap = max(0, cap - cached)  # new tokens whose whole prefix fits under the cap
    return under_cap * cached + under_cap * (under_cap + 1) // 2 + (new - under_cap) * cap


def _gqa_attention_flops(q_heads: int, head_dim: int) -> int:
    return q_heads * (2 * head_dim + 2 * head_dim)  # QK^T and PV, two FLOPs per multiply-add


def _gqa_kv_bytes(kv_heads: int, head_dim: int, dtype_bytes: int) -> int:
    return 2 * kv_heads * head_dim * dtype_bytes  # K and V


# deepseek-ai/DeepSeek-V3.2-Exp config.json: 61 layers, 128 heads, MLA kv_lora_rank 512 +
# qk_rope_head_dim 64, DSA index_n_heads 64, index_head_dim 128, index_topk 2048; 671B total, 37B
# activated per token. KV as FlashMLA's FP8 cache stores it: 512 FP8 latent + 4 FP32 scales + 64
# BF16 rope = 656 bytes, plus the indexer's key, 128 FP8 + one FP32 scale = 132 bytes.
# Weights: 671B parameters stored FP8 (1 byte); one replica is spread over 32 GPUs, DeepSeek-V3's
# prefill deployment (EP32 over 4 nodes, DeepSeek inference system overview); 160K context.
# Attention in MLA's absorbed form (how a short append over a long cache runs): per head and key,
# QK^T over the 576-wide latent+rope and PV over the 512-wide latent.
DEEPSEEK_V32 = TargetModel(
    key="deepseek-v3.2",
    description="DeepSeek-V3.2 (671B MoE, 37B active, MLA + DSA, FP8 KV)",
    layers=61,
    kv_bytes_per_token_per_layer=656 + 132,
    active_params=37e9,
    attention_flops_per_key=128 * (2 * 576 + 2 * 512),
    attended_keys_cap=2048,
    indexer_flops_per_key=64 * 2 * 128,
    total_params=671e9,
    weight_bytes_per_param=1.0,
    indexer_kv_bytes_per_token_per_layer=132,
    weight_shards=32,
    max_context=163_840,
    kv_fp8=True,
)

# A 27B dense-class model shaped like Gemma 3 27B (62 layers, 32 query heads, 16 KV heads, head
# dim 128, BF16 KV). Assumption: every layer attends globally (Gemma's 5-of-6 sliding-window layers
# would store less); this is the heavy-KV end of the dense class.
DENSE_27B = TargetModel(
    key="dense-27b",
    description="27B dense, GQA 32q/16kv heads x 128, 62 layers, BF16 KV, global attention",
    layers=62,
    kv_bytes_per_token_per_layer=_gqa_kv_bytes(kv_heads=16, head_dim=128, dtype_bytes=2),
    active_params=27e9,
    attention_flops_per_key=_gqa_attention_flops(q_heads=32, head_dim=128),
    max_context=131_072,
)

# Qwen/Qwen2.5-32B config.json: 64 layers, 40 query heads, 8 KV heads, head dim 128 (5120 / 40),
# BF16 KV; 31.0B non-embedding parameters (the model card), the ones a token's matmuls use, of
# 32.5B stored; served TP2 (65 GB of BF16 weights leave an 80 GB GPU little room for KV).
QWEN25_32B = TargetModel(
    key="qwen2.5-32b",
    description="Qwen2.5-32B (dense, GQA 40q/8kv heads x 128, 64 layers, BF16 KV)",
    layers=64,
    kv_bytes_per_token_per_layer=_gqa_kv_bytes(kv_heads=8, head_dim=128, dtype_bytes=2),
    active_params=31.0e9,
    attention_flops_per_key=_gqa_attention_flops(q_heads=40, head_dim=128),
    total_params=32.5e9,
    weight_shards=2,
    max_context=131_072,
)

TARGET_MODELS: dict[str, TargetModel] = {m.key: m for m in (DEEPSEEK_V32, DENSE_27B, QWEN25_32B)}


def target_model(key: str) -> TargetModel:
    try:
        return TARGET_MODELS[key]
    except KeyError:
        raise ValueError(f"unknown target model {key!r}; choose one of {', '.join(TARGET_MODELS)}") from None
