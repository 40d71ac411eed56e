"""A differentiable forward pass over the engine's Llama weights, for training.

The engine's `CausalLM.forward` runs under `inference_mode` on a paged KV pool, so it cannot train.
This is the same arithmetic (Hugging Face Llama: RMSNorm, rotary q/k from the engine's own tables,
grouped-query causal attention, SwiGLU MLP, tied or separate LM head) on a batch of equal-length
sequences, over a dict of tensors keyed by the checkpoint's parameter names. So the trained dict
is saved as a checkpoint unchanged, and the engine loads it; `tests/unit/training` checks that
both forwards give the same logits on the same weights.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from agentserve.engine.config import ModelConfig
from agentserve.engine.rope import RotaryEmbedding

Weights = dict[str, torch.Tensor]


def rms_norm(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * weight


class TrainingForward:
    """`logits(weights, input_ids)`: `[batch, seq]` token ids in, `[batch, seq, vocab]` fp32 logits out."""

    def __init__(self, config: ModelConfig):
        if config.model_type != "llama" or config.attention_bias or config.mlp_bias:
            raise ValueError("training supports the bias-free llama architecture only")
        self.config = config
        self.rope = RotaryEmbedding(config)

    def logits(self, weights: Weights, input_ids: torch.Tensor) -> torch.Tensor:
        c = self.config
        batch, seq = input_ids.shape
        heads, kv_heads, d = c.num_attention_heads, c.num_key_value_heads, c.head_dim
        cos, sin = self.rope.cos_sin(torch.arange(seq), seq, torch.float32)
        x = F.embedding(input_ids, weights["model.embed_tokens.weight"])
        for i in range(c.num_hidden_layers):
            w = f"model.layers.{i}."
            h = rms_norm(x, weights[w + "input_layernorm.weight"], c.rms_norm_eps)
            q = F.linear(h, weights[w + "self_attn.q_proj.weight"]).view(batch, seq, heads, d)
            k = F.linear(h, weights[w + "self_attn.k_proj.weight"]).view(batch, seq, kv_heads, d)
            v = F.linear(h, weights[w + "self_attn.v_proj.weight"]).view(batch, seq, kv_heads, d)
            q, k = RotaryEmbedding.rotate(q, cos, sin), RotaryEmbedding.rotate(k, cos, sin)
            out = F.scaled_dot_product_attention(
                q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2), is_causal=True, enable_gqa=True
            )
            x = x + F.linear(out.transpose(1, 2).reshape(batch, seq, heads * d), weights[w + "self_attn.o_proj.weight"])
            h = rms_norm(x, weights[w + "post_attention_layernorm.weight"], c.rms_norm_eps)
            gate = F.silu(F.linear(h, weights[w + "mlp.gate_proj.weight"]))
            gate = gate * F.linear(h, weights[w + "mlp.up_proj.weight"])
            x = x + F.linear(gate, weights[w + "mlp.down_proj.weight"])
        head = weights["model.embed_tokens.weight" if c.tie_word_embeddings else "lm_head.weight"]
        return F.linear(rms_norm(x, weights["model.norm.weight"], c.rms_norm_eps), head).float()

    def loss(self, weights: Weights, tokens: torch.Tensor) -> torch.Tensor:
        """Mean next-token cross-entropy over `[batch, seq + 1]` windows."""
        logits = self.logits(weights, tokens[:, :-1])
        return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), tokens[:, 1:].reshape(-1))
