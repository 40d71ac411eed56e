"""Which shared tokens a blended prefill recomputes, and how far the rest may be off.

A shared block's master was computed with nothing before it; in a prompt it follows private
history. Re-rotating fixes its positions exactly, but not its attention to that history. Per block
of L tokens, with the budget n = ceil(recompute_fraction * L):

1. its first `anchor_tokens` tokens: computed at the start of a sequence they were attention
   sinks, the tokens whose KV changes most once something precedes them;
2. the rest of the budget: the block's tokens with the largest deviation, the squared distance
   between their fresh and reused K and V at the selection layer (`blend`), the cheap early-layer
   measure CacheBlend uses: a token that deviates early keeps deviating in the layers after.

Private tokens and the prompt's last token (whose logits are wanted) are always computed.

The request's estimated deviation is what the budget leaves unrepaired, relative to the KV itself:
sqrt(sum of the unchosen shared tokens' deviations / sum of the shared tokens' fresh K and V
energy) at the selection layer. Above `max_deviation` the request is recomputed in full.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import torch

from agentserve.engine.engine_config import DEFAULT_MAX_DEVIATION

__all__ = ["DEFAULT_MAX_DEVIATION", "RecomputeSelector", "residual_deviation"]

ANCHOR_TOKENS = 2


@dataclass(frozen=True)
class RecomputeSelector:
    fraction: float
    anchor_tokens: int = ANCHOR_TOKENS

    def __post_init__(self) -> None:
        if not 0.0 <= self.fraction <= 1.0:
            raise ValueError(f"recompute_fraction must be in [0, 1], got {self.fraction!r}")
        if self.anchor_tokens < 0:
            raise ValueError(f"anchor_tokens must be >= 0, got {self.anchor_tokens}")

    def budget(self, length: int) -> int:
        """Tokens recomputed of a block of `length` (the 1e-9 keeps 0.25 * 8 from rounding up to 3)."""
        return min(length, math.ceil(self.fraction * length - 1e-9))

    def by_position(self, spans: Sequence[tuple[int, int]]) -> bool:
        """Whether every block's budget is within its anchors: the choice then reads no deviation."""
        return all(self.budget(end - start) <= self.anchor_tokens for start, end in spans)

    def choose(
        self, deviation: torch.Tensor | None, spans: Sequence[tuple[int, int]], num_tokens: int = 0
    ) -> torch.Tensor:
        """Tokens to compute, `[T]` bool, given each token's `deviation` `[T]` and the shared
        blocks' `[start, end)` spans: every token outside them, the last token, and per block its
        anchors then its most deviating tokens up to the budget. `deviation` may be None (then
        `num_tokens` gives T) when the choice is `by_position`."""
        if deviation is None and not self.by_position(spans):
            raise ValueError("a deviation is needed: some block's budget goes past its anchors")
        chosen = torch.ones(deviation.shape[0] if deviation is not None else num_tokens, dtype=torch.bool)
        # The blocks' rows and anchors as index lists: two tensor writes for any number of blocks.
        shared: list[int] = []
        anchors: list[int] = []
        for start, end in spans:
            shared.extend(range(start, end))
            budget = self.budget(end - start)
            first = min(budget, self.anchor_tokens)
            anchors.extend(range(start, start + first))
            if budget > first and deviation is not None:
                top = deviation[start + first : end].topk(budget - first).indices + start + first
                anchors.extend(top.tolist())
        chosen[shared] = False
        chosen[anchors] = True
        chosen[-1] = True
        return chosen


def residual_deviation(
    deviation: torch.Tensor, k: torch.Tensor, v: torch.Tensor, shared: torch.Tensor, chosen: torch.Tensor
) -> float:
    """The estimate above: `deviation` `[T]`, the selection layer's fresh `k`/`v` `[T, heads, d]`,
    `shared` and `chosen` `[T]` bool. 0 when no shared token is left unrecomputed."""
    energy = (k.float().square().sum((1, 2)) + v.float().square().sum((1, 2)))[shared].sum()
    left = deviation[shared & ~chosen].sum()
    if energy <= 0:
        return 0.0
    return math.sqrt(float(left / energy))
