"""A differentiable forward pass over the engine's Llama (and Mixtral) weights, for training.

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
from agentserve.engine.moe_config import MoeConfig
from agentserve.engine.rope import RotaryEmbedding

Weights = dict[str, torch.Tensor]


def rms_norm(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * weight


class TrainingForward:
    """`logits(weights, input_ids)`: `[batch, seq]` token ids in, `[batch, seq, vocab]` fp32 logits out.

    A mixtral config gets Mixtral's sparse block in place of the MLP (`engine.moe`'s arithmetic:
    fp32 softmax over the router's logits, top-k renormalised, the chosen experts' outputs weighted
    and summed), and `loss` adds the Switch Transformer load-balancing term, `router_aux_coef`
    times experts * sum_e (share of token copies routed to e) * (mean router probability of e),
    so the router learns to use every expert without being forced to use them equally.
    """

    def __init__(self, config: ModelConfig, router_aux_coef: float = 0.0):
        supported = config.model_type in ("llama", "mixtral") and not config.attention_bias and not config.mlp_bias
        if not supported:
            raise ValueError("training supports the bias-free llama and mixtral architectures only")
        if router_aux_coef < 0:
            raise ValueError(f"router_aux_coef must be >= 0, got {router_aux_coef}")
        self.config = config
        self.router_aux_coef = router_aux_coef
        self.rope = RotaryEmbedding(config)

    def logits(self, weights: Weights, input_ids: torch.Tensor) -> torch.Tensor:
        return self.forward(weights, input_ids)[0]

    def forward(self, weights: Weights, input_ids: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """(logits, the load-balancing term summed over sparse layers; 0 for a dense model)."""
        c = self.config
        batch, seq = input_ids.shape
        heads, kv_heads, d = c.num_attention_heads, c.num_key_value_heads, c.head_dim
        cos, sin = self.rope.cos_sin(torch.arange(seq), seq, torch.float32)
        x = F.embedding(input_ids, weights["model.embed_tokens.weight"])
        balance = torch.zeros(())
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
            if c.moe is not None and c.moe.is_sparse(i):
                y, layer_balance = sparse_block(h.reshape(batch * seq, -1), weights, w + "block_sparse_moe.", c.moe)
                x = x + y.view(batch, seq, -1)
                balance = balance + layer_balance
            else:
                gate = F.silu(F.linear(h, weights[w + "mlp.gate_proj.weight"]))
                gate = gate * F.linear(h, weights[w + "mlp.up_proj.weight"])
                x = x + F.linear(gate, weights[w + "mlp.down_proj.weight"])
        head = weights["model.embed_tokens.weight" if c.tie_word_embeddings else "lm_head.weight"]
        return F.linear(rms_norm(x, weights["model.norm.weight"], c.rms_norm_eps), head).float(), balance

    def loss(self, weights: Weights, tokens: torch.Tensor) -> torch.Tensor:
        """Mean next-token cross-entropy over `[batch, seq + 1]` windows (plus the weighted
        load-balancing term for a MoE model)."""
        logits, balance = self.forward(weights, tokens[:, :-1])
        loss = F.cross_entropy(logits.reshape(-1, logits.shape[-1]), tokens[:, 1:].reshape(-1))
        return loss + self.router_aux_coef * balance if self.config.moe is not None else loss


def sparse_block(h: torch.Tensor, weights: Weights, prefix: str, moe: MoeConfig) -> tuple[torch.Tensor, torch.Tensor]:
    """Mixtral's sparse block on `[tokens, hidden]`: (output, the layer's load-balancing term).

    The token copies are sorted by expert once, so each expert's rows are one slice of a single
    gather, and the weighted outputs go back by one permutation (one gather and one scatter in
    the backward pass too, rather than one per expert)."""
    probs = F.softmax(F.linear(h, weights[prefix + "gate.weight"]).float(), dim=-1)
    top, chosen = torch.topk(probs, moe.top_k, dim=-1)
    top = top / top.sum(dim=-1, keepdim=True)
    experts = chosen.flatten()
    order = torch.argsort(experts, stable=True)
    tokens = order // moe.top_k
    counts = torch.bincount(experts, minlength=moe.num_experts)
    rows = h[tokens].split(counts.tolist())
    outputs = []
    for e, x in enumerate(rows):
        expert = f"{prefix}experts.{e}."
        y = F.silu(F.linear(x, weights[expert + "w1.weight"])) * F.linear(x, weights[expert + "w3.weight"])
        outputs.append(F.linear(y, weights[expert + "w2.weight"]))
    weighted = torch.cat(outputs) * top.flatten()[order, None]
    # Back to [token, k] order and summed over k: gathers only (CPU index_add is a slow scatter_add).
    copies = torch.empty_like(weighted)
    copies[order] = weighted
    out = copies.view(h.shape[0], moe.top_k, -1).sum(dim=1)
    routed = counts.float() / experts.numel()
    return out, moe.num_experts * (routed * probs.mean(dim=0)).sum()
