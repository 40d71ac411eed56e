"""LayerPlan: one decoder layer as the forward pass runs it, plain tensors and one function.

The `nn.Module` tree in `model` is there to give every parameter its Hugging Face name. Walking it
module by module costs ~30 module dispatches and ~100 attribute lookups per forward, ~10% of a
prefill of a few dozen tokens on a cached prefix; so `CausalLM.rebuild_derived` flattens each
layer into a `LayerPlan` once, and `run_layer` runs it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

import torch
import torch.nn.functional as F

from agentserve.engine.attention import DecodeMetadata, PrefillMetadata, paged_attention
from agentserve.engine.kv_pool import KVPool
from agentserve.engine.linears import gate_up_halves, row_invariant_linear
from agentserve.engine.rope import RotaryEmbedding
from agentserve.kv.fp8 import round_to_fp8

# (weight, bias) of a linear layer, as `F.linear` takes them.
WeightBias = tuple[torch.Tensor, torch.Tensor | None]


@dataclass(frozen=True)
class Norm:
    """An RMSNorm with HF's arithmetic, bit for bit, in a third of `F.rms_norm`'s dispatches.

    `eps` and `width` are 0-d tensors: as Python scalars each in-place op would first wrap its
    scalar into a tensor (four dispatches every time).
    """

    weight: torch.Tensor
    eps: torch.Tensor
    width: torch.Tensor

    @classmethod
    def build(cls, weight: torch.Tensor, eps: float) -> Norm:
        def scalar(value: float) -> torch.Tensor:
            return torch.tensor(value, dtype=torch.float32, device=weight.device)

        return cls(weight, scalar(eps), scalar(float(weight.shape[-1])))

    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        x32 = x if x.dtype == torch.float32 else x.float()
        normed = x32 * torch.sum(x32 * x32, -1, keepdim=True).div_(self.width).add_(self.eps).rsqrt_()
        if x.dtype == torch.float32:
            return normed * self.weight
        # Cast back before the weight, as HF does (bf16 parity).
        return self.weight * normed.to(x.dtype)


class FeedForward(Protocol):
    """A layer's feed-forward block on its post-attention-norm input `[tokens, hidden]`: a dense
    SwiGLU (`DenseMlp`) or a mixture of experts (`moe.SparseMoe`). `batch_invariant`: each row's
    result must not depend on the other rows (`linears.row_invariant_linear`)."""

    def __call__(self, h: torch.Tensor, batch_invariant: bool) -> torch.Tensor: ...


@dataclass(frozen=True)
class DenseMlp:
    """SwiGLU: down(silu(gate(h)) * up(h)), gate|up fused."""

    gate_up: WeightBias
    down: WeightBias

    def __call__(self, h: torch.Tensor, batch_invariant: bool) -> torch.Tensor:
        gate, up = gate_up_halves(h, *self.gate_up, batch_invariant=batch_invariant)
        gate = F.silu(gate, inplace=True).mul_(up)  # in place: no new buffers
        return (row_invariant_linear if batch_invariant else F.linear)(gate, *self.down)


@dataclass(frozen=True)
class LayerPlan:
    index: int
    heads: int
    kv_heads: int
    head_dim: int
    input_norm: Norm
    qkv: WeightBias  # fused q|k|v
    o_proj: WeightBias
    post_norm: Norm
    ffn: FeedForward
    qk_norm: tuple[Norm, Norm] | None = None  # Qwen3: each head's q and k normalised before RoPE


def run_layer(
    x: torch.Tensor,
    p: LayerPlan,
    cos: torch.Tensor,
    sin: torch.Tensor,
    pool: KVPool,
    meta: PrefillMetadata | DecodeMetadata,
) -> torch.Tensor:
    """x: `[tokens, hidden]` in, the layer's output out; writes the tokens' KV into `pool`."""
    n, heads, kv_heads, d = x.shape[0], p.heads, p.kv_heads, p.head_dim
    linear = row_invariant_linear if meta.batch_invariant else F.linear
    qkv = linear(p.input_norm(x), *p.qkv)
    # q and k side by side in the fused output: one rotary pass covers both.
    qk = qkv[:, : (heads + kv_heads) * d].view(n, heads + kv_heads, d)
    if p.qk_norm is not None:
        qk = torch.cat([p.qk_norm[0](qk[:, :heads]), p.qk_norm[1](qk[:, heads:])], dim=1)
    qk = RotaryEmbedding.rotate(qk, cos, sin)
    v = qkv[:, (heads + kv_heads) * d :].view(n, kv_heads, d)
    k = qk[:, heads:]
    if pool.fp8:  # attend over the FP8 values the pool keeps (`kv_pool`), in a prefill as in a decode
        k, v = round_to_fp8(k), round_to_fp8(v)
    k_rows, v_rows = pool.flat(p.index)
    out = paged_attention(qk[:, :heads], k, v, k_rows, v_rows, meta, heads // kv_heads)
    x = x + linear(out.reshape(n, heads * d), *p.o_proj)
    return x + p.ffn(p.post_norm(x), meta.batch_invariant)
