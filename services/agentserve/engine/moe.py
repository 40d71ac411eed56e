"""Mixture-of-experts blocks: Qwen2-MoE's and Mixtral's parameters under Hugging Face's names, and
`SparseMoe`, the plan the forward pass runs for either.

The arithmetic is transformers' own (`Qwen2MoeSparseMoeBlock`, `MixtralSparseMoeBlock`), step for
step, so fp32 logits agree to rounding: router logits in the model's dtype, softmax in fp32, the
top-k probabilities (renormalised to sum to 1 where `MoeConfig.renormalise`), each chosen expert's
SwiGLU output times its probability added into a zero buffer in ascending expert order, then the
shared expert's output times sigmoid(its gate) where the model has one.

Tokens are grouped by expert, so an expert runs one product over all its tokens; with an expert
placement (`expert_placement`), one product per rank holding a replica, over the tokens the
router's split sent to that rank. Every product is
`linears.row_invariant_linear` when the batch asks for batch invariance, so a token's output does
not depend on which other tokens share its experts.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

from agentserve.engine.expert_load import LayerLoad
from agentserve.engine.layer_plan import DenseMlp
from agentserve.engine.linears import FusedLinear, row_invariant_linear, store_column_major
from agentserve.engine.mlp import MLP
from agentserve.engine.moe_config import MoeConfig


@dataclass(frozen=True)
class SparseMoe:
    """One sparse layer's feed-forward block (`layer_plan.FeedForward`)."""

    router: torch.Tensor  # [experts, hidden], column-major
    experts: tuple[DenseMlp, ...]
    top_k: int
    renormalise: bool
    # Mixtral multiplies an expert's output by its fp32 routing weight; Qwen2-MoE first casts the
    # weights to the activations' dtype. Equal in fp32, a rounding apart in bf16/fp16.
    fp32_route_weights: bool
    shared: DenseMlp | None
    shared_gate: torch.Tensor | None  # [1, hidden], column-major
    load: LayerLoad  # this layer's counts, and its replica split when the engine has a placement

    def route(self, h: torch.Tensor, batch_invariant: bool) -> tuple[torch.Tensor, torch.Tensor]:
        """(weights, experts), both `[tokens, top_k]`: each token's chosen experts and their weights."""
        logits = (row_invariant_linear if batch_invariant else F.linear)(h, self.router)
        probs = F.softmax(logits, dim=-1, dtype=torch.float32)
        weights, experts = torch.topk(probs, self.top_k, dim=-1)
        if self.renormalise:
            weights /= weights.sum(dim=-1, keepdim=True)
        return (weights if self.fp32_route_weights else weights.to(h.dtype)), experts

    def __call__(self, h: torch.Tensor, batch_invariant: bool) -> torch.Tensor:
        weights, chosen = self.route(h, batch_invariant)
        per_expert = torch.bincount(chosen.flatten(), minlength=len(self.experts))
        self.load.counts.add_(per_expert)
        split = self.load.split
        ranks = None if split is None else split.assign(chosen)
        out = torch.zeros_like(h)
        for expert in per_expert.nonzero().flatten().tolist():
            tokens, slot = torch.where(chosen == expert)
            for part in _by_rank(tokens, slot, ranks):
                tokens_r, slot_r = tokens[part], slot[part]
                y = self.experts[expert](h[tokens_r], batch_invariant) * weights[tokens_r, slot_r, None]
                # A token appears once per expert, so a gather, add and plain scatter is transformers'
                # index_add_ bit for bit, without CPU index_add_'s scatter_add path (~100x slower here).
                out[tokens_r] = out[tokens_r] + y.to(out.dtype)
        if self.shared is None or self.shared_gate is None:
            return out
        gate = (row_invariant_linear if batch_invariant else F.linear)(h, self.shared_gate)
        return out + torch.sigmoid(gate) * self.shared(h, batch_invariant)


def _by_rank(tokens: torch.Tensor, slot: torch.Tensor, ranks: torch.Tensor | None) -> list[torch.Tensor | slice]:
    """An expert's copies grouped by the replica's rank computing them (one group unplaced): each
    rank runs its own product, as an expert-parallel rank would. With batch invariance a row's
    output does not depend on the rows beside it, so the split leaves every value unchanged."""
    if ranks is None:
        return [slice(None)]
    owner = ranks[tokens, slot]
    return [owner == rank for rank in torch.unique(owner).tolist()]


class Qwen2MoeBlock(nn.Module):
    """`Qwen2MoeSparseMoeBlock`'s parameters: `gate` (the router), `experts.{i}.*_proj`,
    `shared_expert.*_proj` and `shared_expert_gate`."""

    def __init__(self, hidden_size: int, moe: MoeConfig):
        super().__init__()
        self.moe = moe
        self.gate = nn.Linear(hidden_size, moe.num_experts, bias=False)
        self.experts = nn.ModuleList(MLP(hidden_size, moe.expert_intermediate_size) for _ in range(moe.num_experts))
        self.shared_expert = MLP(hidden_size, moe.shared_expert_intermediate_size) if moe.has_shared_expert else None
        self.shared_expert_gate = nn.Linear(hidden_size, 1, bias=False) if moe.has_shared_expert else None

    def derive(self, load: LayerLoad) -> SparseMoe:
        store_column_major(self.gate)
        if self.shared_expert_gate is not None:
            store_column_major(self.shared_expert_gate)
        return SparseMoe(
            router=self.gate.weight,
            experts=tuple(expert.derive() for expert in self.experts),  # type: ignore[operator]
            top_k=self.moe.top_k,
            renormalise=self.moe.renormalise,
            fp32_route_weights=False,
            shared=None if self.shared_expert is None else self.shared_expert.derive(),
            shared_gate=None if self.shared_expert_gate is None else self.shared_expert_gate.weight,
            load=load,
        )


class MixtralExpert(nn.Module):
    """`w1` gate, `w3` up, `w2` down: Mixtral's names for a SwiGLU expert."""

    def __init__(self, hidden_size: int, intermediate_size: int):
        super().__init__()
        self.w1 = nn.Linear(hidden_size, intermediate_size, bias=False)
        self.w2 = nn.Linear(intermediate_size, hidden_size, bias=False)
        self.w3 = nn.Linear(hidden_size, intermediate_size, bias=False)
        self.gate_up = FusedLinear(self.w1, self.w3)

    def derive(self) -> DenseMlp:
        self.gate_up.fuse()
        store_column_major(self.w2)
        return DenseMlp(gate_up=(self.gate_up.weight, None), down=(self.w2.weight, None))


class MixtralBlock(nn.Module):
    """`MixtralSparseMoeBlock`'s parameters: `gate` (the router) and `experts.{i}.w{1,2,3}`."""

    def __init__(self, hidden_size: int, moe: MoeConfig):
        super().__init__()
        self.moe = moe
        self.gate = nn.Linear(hidden_size, moe.num_experts, bias=False)
        self.experts = nn.ModuleList(
            MixtralExpert(hidden_size, moe.expert_intermediate_size) for _ in range(moe.num_experts)
        )

    def derive(self, load: LayerLoad) -> SparseMoe:
        store_column_major(self.gate)
        return SparseMoe(
            router=self.gate.weight,
            experts=tuple(expert.derive() for expert in self.experts),  # type: ignore[operator]
            top_k=self.moe.top_k,
            renormalise=self.moe.renormalise,
            fp32_route_weights=True,
            shared=None,
            shared_gate=None,
            load=load,
        )
