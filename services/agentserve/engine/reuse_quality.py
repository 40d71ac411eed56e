"""How far reused KV moves next-token distributions from a full recompute's (TokenDance quality)."""

from __future__ import annotations

from dataclasses import dataclass

import torch


@dataclass(frozen=True)
class DistributionGap:
    """Per scored position: whether the top-1 tokens agree, and KL(full || reused) in nats."""

    top1_agree: torch.Tensor  # [n] bool
    kl: torch.Tensor  # [n] float64


def distribution_gap(full_logits: torch.Tensor, reused_logits: torch.Tensor) -> DistributionGap:
    """`full_logits`, `reused_logits`: `[n, vocab]` at the same positions. KL is taken from the full
    recompute's distribution (the reference) to the reused one, in float64."""
    if full_logits.shape != reused_logits.shape:
        raise ValueError(f"logits shapes differ: {tuple(full_logits.shape)} vs {tuple(reused_logits.shape)}")
    log_p = torch.log_softmax(full_logits.double(), -1)
    log_q = torch.log_softmax(reused_logits.double(), -1)
    kl = (log_p.exp() * (log_p - log_q)).sum(-1).clamp_min(0.0)  # rounding can leave -1e-17
    return DistributionGap(full_logits.argmax(-1) == reused_logits.argmax(-1), kl)
