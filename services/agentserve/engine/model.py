"""A Llama-architecture decoder (and the Qwen2 q/k/v-bias variant) over a paged KV pool.

Parameter names mirror Hugging Face's `LlamaForCausalLM` exactly (`model.layers.0.self_attn.q_proj`
...), so a checkpoint's state dict loads without a rename table.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
import torch.nn.functional as F
from torch import nn

from agentserve.engine.attention import DecodeMetadata, PrefillMetadata, paged_attention
from agentserve.engine.config import ModelConfig
from agentserve.engine.kv_pool import KVPool
from agentserve.engine.rope import RotaryEmbedding

# Called with a layer index just before that layer runs; layerwise KV loading hooks in here.
LayerHook = Callable[[int], None]


class RMSNorm(nn.Module):
    def __init__(self, size: int, eps: float):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(size))
        self.eps = eps

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        # Normalise in fp32 and cast back before the weight, as HF does (bf16 parity).
        dtype = x.dtype
        x32 = x.float()
        x32 = x32 * torch.rsqrt(x32.pow(2).mean(-1, keepdim=True) + self.eps)
        return self.weight * x32.to(dtype)


class Attention(nn.Module):
    def __init__(self, config: ModelConfig, layer_idx: int):
        super().__init__()
        self.layer_idx = layer_idx
        self.num_heads = config.num_attention_heads
        self.num_kv_heads = config.num_key_value_heads
        self.head_dim = config.head_dim
        bias = config.attention_bias
        self.q_proj = nn.Linear(config.hidden_size, self.num_heads * self.head_dim, bias=bias)
        self.k_proj = nn.Linear(config.hidden_size, self.num_kv_heads * self.head_dim, bias=bias)
        self.v_proj = nn.Linear(config.hidden_size, self.num_kv_heads * self.head_dim, bias=bias)
        # Qwen2 puts biases on q/k/v only; Llama's attention_bias covers o_proj too.
        o_bias = bias and config.model_type == "llama"
        self.o_proj = nn.Linear(self.num_heads * self.head_dim, config.hidden_size, bias=o_bias)

    def forward(self, x, cos, sin, pool: KVPool, meta: PrefillMetadata | DecodeMetadata) -> torch.Tensor:
        n = x.shape[0]
        q = RotaryEmbedding.apply(self.q_proj(x).view(n, self.num_heads, self.head_dim), cos, sin)
        k = RotaryEmbedding.apply(self.k_proj(x).view(n, self.num_kv_heads, self.head_dim), cos, sin)
        v = self.v_proj(x).view(n, self.num_kv_heads, self.head_dim)
        k_rows, v_rows = pool.flat(self.layer_idx)
        out = paged_attention(q, k, v, k_rows, v_rows, meta, self.num_heads // self.num_kv_heads)
        return self.o_proj(out.reshape(n, self.num_heads * self.head_dim))


class MLP(nn.Module):
    def __init__(self, config: ModelConfig):
        super().__init__()
        bias = config.mlp_bias
        self.gate_proj = nn.Linear(config.hidden_size, config.intermediate_size, bias=bias)
        self.up_proj = nn.Linear(config.hidden_size, config.intermediate_size, bias=bias)
        self.down_proj = nn.Linear(config.intermediate_size, config.hidden_size, bias=bias)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.down_proj(F.silu(self.gate_proj(x)) * self.up_proj(x))


class DecoderLayer(nn.Module):
    def __init__(self, config: ModelConfig, layer_idx: int):
        super().__init__()
        self.self_attn = Attention(config, layer_idx)
        self.mlp = MLP(config)
        self.input_layernorm = RMSNorm(config.hidden_size, config.rms_norm_eps)
        self.post_attention_layernorm = RMSNorm(config.hidden_size, config.rms_norm_eps)

    def forward(self, x, cos, sin, pool, meta) -> torch.Tensor:
        x = x + self.self_attn(self.input_layernorm(x), cos, sin, pool, meta)
        return x + self.mlp(self.post_attention_layernorm(x))


class DecoderStack(nn.Module):
    def __init__(self, config: ModelConfig):
        super().__init__()
        self.embed_tokens = nn.Embedding(config.vocab_size, config.hidden_size)
        self.layers = nn.ModuleList(DecoderLayer(config, i) for i in range(config.num_hidden_layers))
        self.norm = RMSNorm(config.hidden_size, config.rms_norm_eps)
        self.rotary_emb = RotaryEmbedding(config)


class CausalLM(nn.Module):
    """`forward` returns logits only for `logits_rows` (prefill needs just the last position)."""

    def __init__(self, config: ModelConfig):
        super().__init__()
        self.config = config
        self.model = DecoderStack(config)
        self.lm_head = nn.Linear(config.hidden_size, config.vocab_size, bias=False)
        if config.tie_word_embeddings:
            self.lm_head.weight = self.model.embed_tokens.weight

    @torch.inference_mode()
    def forward(
        self,
        input_ids: torch.Tensor,
        positions: torch.Tensor,
        pool: KVPool,
        meta: PrefillMetadata | DecodeMetadata,
        logits_rows: torch.Tensor | None = None,
        before_layer: LayerHook | None = None,
    ) -> torch.Tensor:
        x = self.model.embed_tokens(input_ids)
        cos, sin = self.model.rotary_emb.cos_sin(positions, x.dtype)
        for i, layer in enumerate(self.model.layers):
            if before_layer is not None:
                before_layer(i)
            x = layer(x, cos, sin, pool, meta)
        if logits_rows is not None:
            x = x[logits_rows]
        return self.lm_head(self.model.norm(x)).float()
