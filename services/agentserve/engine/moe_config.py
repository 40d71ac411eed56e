"""MoeConfig: the mixture-of-experts part of a Hugging Face `config.json` (Qwen2-MoE, Qwen3-MoE,
Mixtral). Qwen3-MoE's sparse block is Qwen2-MoE's without a shared expert (its attention adds a
per-head RMSNorm on q and k, `ModelConfig.qk_norm`).

Both architectures route each token to its `top_k` highest-probability experts (softmax over
the router's logits, in fp32) and sum the chosen experts' SwiGLU outputs weighted by those
probabilities. They differ in three ways that this config carries:

- Mixtral renormalises the top-k probabilities to sum to 1; Qwen2-MoE does so only when
  `norm_topk_prob` is set (off in the released checkpoints).
- Qwen2-MoE adds a shared expert (a dense SwiGLU of its own width) to every token, scaled by a
  sigmoid gate; Mixtral has none (`shared_expert_intermediate_size` 0).
- Qwen2-MoE may keep some layers dense (`mlp_only_layers`, `decoder_sparse_step`); Mixtral's
  every layer is sparse.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

MOE_MODEL_TYPES = ("qwen2_moe", "qwen3_moe", "mixtral")


@dataclass(frozen=True)
class MoeConfig:
    num_experts: int
    top_k: int
    expert_intermediate_size: int
    renormalise: bool
    shared_expert_intermediate_size: int = 0  # 0: no shared expert
    sparse_layers: tuple[int, ...] = ()  # layer indices with an expert block; the others are dense

    def __post_init__(self) -> None:
        for name in ("num_experts", "top_k", "expert_intermediate_size"):
            value = getattr(self, name)
            if not isinstance(value, int) or value <= 0:
                raise ValueError(f"config.{name} must be a positive integer, got {value!r}")
        if self.top_k > self.num_experts:
            raise ValueError(f"num_experts_per_tok ({self.top_k}) exceeds the number of experts ({self.num_experts})")
        if self.shared_expert_intermediate_size < 0:
            width = self.shared_expert_intermediate_size
            raise ValueError(f"shared_expert_intermediate_size must be >= 0, got {width}")

    @property
    def has_shared_expert(self) -> bool:
        return self.shared_expert_intermediate_size > 0

    def is_sparse(self, layer: int) -> bool:
        return layer in self.sparse_layers

    @classmethod
    def from_dict(cls, model_type: str, raw: dict[str, Any], num_layers: int) -> MoeConfig:
        """The MoE fields of a `model_type` config.json; a missing required field raises KeyError."""
        if model_type == "mixtral":
            if raw.get("sliding_window") is not None:
                raise ValueError("mixtral with sliding_window is not supported; set it to null")
            return cls(
                num_experts=int(raw["num_local_experts"]),
                top_k=int(raw["num_experts_per_tok"]),
                expert_intermediate_size=int(raw["intermediate_size"]),
                renormalise=True,
                sparse_layers=tuple(range(num_layers)),
            )
        if raw.get("use_sliding_window"):
            raise ValueError(f"{model_type} with use_sliding_window is not supported")
        step = int(raw.get("decoder_sparse_step", 1))
        if step <= 0:
            raise ValueError(f"config.decoder_sparse_step must be a positive integer, got {step}")
        dense = {int(i) for i in raw.get("mlp_only_layers") or ()}
        # Released checkpoints write num_experts; transformers >= 5 writes Qwen3-MoE's as num_local_experts.
        experts = int(raw["num_experts"] if "num_experts" in raw else raw["num_local_experts"])
        return cls(
            num_experts=experts,
            top_k=int(raw["num_experts_per_tok"]),
            expert_intermediate_size=int(raw["moe_intermediate_size"]),
            renormalise=bool(raw.get("norm_topk_prob", False)),
            shared_expert_intermediate_size=int(raw.get("shared_expert_intermediate_size") or 0),
            sparse_layers=tuple(i for i in range(num_layers) if i not in dense and (i + 1) % step == 0),
        )
