"""A Llama-architecture decoder (the Qwen2 q/k/v-bias variant, and the Qwen2-MoE, Qwen3-MoE and
Mixtral mixture-of-experts variants, `moe`) over a paged KV pool.

Parameter names mirror Hugging Face's `LlamaForCausalLM` exactly (`model.layers.0.self_attn.q_proj`
...), so a checkpoint's state dict loads without a rename table. The forward pass does not walk
the module tree: it runs on what `rebuild_derived` derives from those parameters, fused q|k|v and
gate|up weights stored column-major (`linears`), one flat `LayerPlan` per layer (`layer_plan`)
and rotary tables.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import cast

import torch
import torch.nn.functional as F
from torch import nn

from agentserve.engine.attention import DecodeMetadata, PrefillMetadata
from agentserve.engine.config import ModelConfig
from agentserve.engine.expert_load import ExpertLoad
from agentserve.engine.kv_pool import KVPool
from agentserve.engine.layer_plan import FeedForward, LayerPlan, Norm, run_layer
from agentserve.engine.linears import FusedLinear, column_major, head_linear, store_column_major
from agentserve.engine.mlp import MLP
from agentserve.engine.moe import MixtralBlock, Qwen2MoeBlock
from agentserve.engine.rope import RotaryEmbedding

# Called with a layer index just before that layer runs; layerwise KV loading hooks in here.
LayerHook = Callable[[int], None]


class RMSNorm(nn.Module):
    def __init__(self, size: int, eps: float):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(size))
        self.eps = eps

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return Norm.build(self.weight, self.eps)(x)


class Attention(nn.Module):
    """Parameters only: `layer_plan.run_layer` runs the layer."""

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
        self.qkv = FusedLinear(self.q_proj, self.k_proj, self.v_proj)
        # Qwen3's per-head RMSNorm of q and k, before RoPE.
        self.q_norm = RMSNorm(self.head_dim, config.rms_norm_eps) if config.qk_norm else None
        self.k_norm = RMSNorm(self.head_dim, config.rms_norm_eps) if config.qk_norm else None


class DecoderLayer(nn.Module):
    """Parameters, and `derive` to turn them into the `LayerPlan` that `layer_plan.run_layer` runs.

    The feed-forward block sits under HF's name for it: `mlp` (dense, or Qwen2-MoE's sparse
    block) or `block_sparse_moe` (Mixtral's)."""

    def __init__(self, config: ModelConfig, layer_idx: int):
        super().__init__()
        self.self_attn = Attention(config, layer_idx)
        moe = config.moe
        ffn: nn.Module
        if moe is None or not moe.is_sparse(layer_idx):
            ffn = MLP(config.hidden_size, config.intermediate_size, config.mlp_bias)
        elif config.model_type == "mixtral":
            ffn = MixtralBlock(config.hidden_size, moe)
        else:
            ffn = Qwen2MoeBlock(config.hidden_size, moe)
        self.ffn_name = "block_sparse_moe" if isinstance(ffn, MixtralBlock) else "mlp"
        self.add_module(self.ffn_name, ffn)
        self.input_layernorm = RMSNorm(config.hidden_size, config.rms_norm_eps)
        self.post_attention_layernorm = RMSNorm(config.hidden_size, config.rms_norm_eps)

    def derive(self, expert_load: ExpertLoad | None) -> LayerPlan:
        """Fuse and lay out this layer's weights for the forward pass (`linears`), and plan it;
        a sparse layer's plan counts its routing into `expert_load`."""
        attn = self.self_attn
        attn.qkv.fuse()
        store_column_major(attn.o_proj)
        ffn = getattr(self, self.ffn_name)
        if isinstance(ffn, MLP):
            plan: FeedForward = ffn.derive()
        else:
            assert expert_load is not None, "a sparse layer in a model without expert counts"
            plan = ffn.derive(expert_load.layer(attn.layer_idx))
        return LayerPlan(
            index=attn.layer_idx,
            heads=attn.num_heads,
            kv_heads=attn.num_kv_heads,
            head_dim=attn.head_dim,
            input_norm=Norm.build(self.input_layernorm.weight, self.input_layernorm.eps),
            qkv=(attn.qkv.weight, attn.qkv.bias),
            o_proj=(attn.o_proj.weight, attn.o_proj.bias),
            post_norm=Norm.build(self.post_attention_layernorm.weight, self.post_attention_layernorm.eps),
            ffn=plan,
            qk_norm=None
            if attn.q_norm is None or attn.k_norm is None
            else (Norm.build(attn.q_norm.weight, attn.q_norm.eps), Norm.build(attn.k_norm.weight, attn.k_norm.eps)),
        )


class DecoderStack(nn.Module):
    def __init__(self, config: ModelConfig):
        super().__init__()
        self.embed_tokens = nn.Embedding(config.vocab_size, config.hidden_size)
        self.layers = nn.ModuleList(DecoderLayer(config, i) for i in range(config.num_hidden_layers))
        self.norm = RMSNorm(config.hidden_size, config.rms_norm_eps)
        self.rotary_emb = RotaryEmbedding(config)


class CausalLM(nn.Module):
    """`forward` returns logits only for `logits_rows` (prefill needs just the last position)."""

    tied_head_weight: torch.Tensor | None
    final_norm: Norm

    def __init__(self, config: ModelConfig):
        super().__init__()
        self.config = config
        self.model = DecoderStack(config)
        self.lm_head = nn.Linear(config.hidden_size, config.vocab_size, bias=False)
        if config.tie_word_embeddings:
            self.lm_head.weight = self.model.embed_tokens.weight
        # A tied head shares its storage with the row-major embedding table (the token lookup
        # needs rows), so it gets its own column-major copy.
        self.register_buffer("tied_head_weight", None, persistent=False)
        # Tokens routed to each expert of each sparse layer (MoE models only; `expert_load`).
        self.expert_load: ExpertLoad | None = None
        self.plans: list[LayerPlan] = []
        self.rebuild_derived()

    def rebuild_derived(self) -> None:
        """Rebuild what the forward pass runs on from the HF parameters and the config.

        Call it after replacing or changing weights (the loader does, after
        `load_state_dict(assign=True)`) or moving the model: fused projections, column-major
        layouts, the tied head's copy, the layer plans and the rotary tables are all derived.
        """
        moe, device = self.config.moe, self.model.embed_tokens.weight.device
        if moe is not None and (self.expert_load is None or self.expert_load.counts.device != device):
            # Counts live beside the weights (a model built on the meta device gets them on load).
            self.expert_load = ExpertLoad(moe, device)
        self.plans = [cast(DecoderLayer, layer).derive(self.expert_load) for layer in self.model.layers]
        self.final_norm = Norm.build(self.model.norm.weight, self.model.norm.eps)
        if self.config.tie_word_embeddings:
            self.tied_head_weight = column_major(self.lm_head.weight)
        else:
            store_column_major(self.lm_head)
        self.model.rotary_emb = RotaryEmbedding(self.config).to(device)

    @torch.inference_mode()
    def forward(
        self,
        input_ids: torch.Tensor,
        positions: torch.Tensor | slice,
        pool: KVPool,
        meta: PrefillMetadata | DecodeMetadata,
        logits_rows: torch.Tensor | slice | None = None,
        before_layer: LayerHook | None = None,
        exit_after: int | None = None,
    ) -> torch.Tensor:
        """`exit_after`: run only the first that many layers before the head (a self-speculative
        draft, `engine.speculative.early_exit`); None runs them all.

        The inputs may come from the host: ids, positions and `meta` are put on the pool's device
        (no-ops when already there). The logits return to the host, where sampling, grammar masks
        and speculative acceptance run."""
        device = pool.device
        input_ids = input_ids.to(device)
        if isinstance(positions, torch.Tensor):
            positions = positions.to(device)
        meta.move_to(device)
        x = F.embedding(input_ids, self.model.embed_tokens.weight)
        # Once per forward, shared by every layer.
        cos, sin = self.model.rotary_emb.cos_sin(positions, meta.context_len, x.dtype)
        for plan in self.plans[:exit_after]:
            if before_layer is not None:
                before_layer(plan.index)
            x = run_layer(x, plan, cos, sin, pool, meta)
        if self.expert_load is not None:
            self.expert_load.forward_done()
        if logits_rows is not None:
            x = x[logits_rows]
        return self.logits(x, meta.batch_invariant).cpu()

    def logits(self, x: torch.Tensor, batch_invariant: bool = True) -> torch.Tensor:
        """Float logits of the last layer's output rows `x` (the final norm, then the LM head)."""
        return head_linear(self.final_norm(x), self.head_weight, batch_invariant).float()

    @property
    def head_weight(self) -> torch.Tensor:
        """The LM head's weight as the forward pass reads it (column-major; a tied head's own copy)."""
        return self.lm_head.weight if self.tied_head_weight is None else self.tied_head_weight
