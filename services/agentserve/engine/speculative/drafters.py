"""Drafters: who proposes the tokens a speculative step asks the target to verify.

A drafter is chosen by name (`SpeculativeConfig.method`). The engine calls `propose` on its decode
step, after it has reserved pool slots for each sequence's `budget` draft positions; a drafter
may write KV into those positions (the verify forward overwrites them). Each draft says which
distribution its tokens were drawn from, which rejection sampling needs (`acceptance`).
"""

from __future__ import annotations

from collections.abc import Sequence as Seq
from dataclasses import dataclass, field
from typing import Protocol

import torch

from agentserve.engine.sequence import Sequence


@dataclass(frozen=True)
class Draft:
    """Up to `budget` proposed tokens of one sequence; `probs[j]` the `[vocab]` distribution
    `tokens[j]` was drawn from, or None throughout for a deterministic draft (one-hot)."""

    tokens: list[int] = field(default_factory=list)
    probs: list[torch.Tensor] | None = None

    def at(self, j: int) -> tuple[int, torch.Tensor | None] | None:
        """Draft position `j`'s token and distribution; None past the draft."""
        if j >= len(self.tokens):
            return None
        return self.tokens[j], None if self.probs is None else self.probs[j]


class Drafter(Protocol):
    def propose(self, seqs: Seq[Sequence], budgets: Seq[int]) -> list[Draft]:
        """One draft per sequence, at most `budgets[i]` tokens long (0: an empty draft). Runs on
        the engine's thread inside its step; must not change the sequences."""
        ...


def lookup(tokens: Seq[int], n: int, k: int) -> list[int]:
    """Prompt lookup: the up to `k` tokens that followed the most recent earlier occurrence of
    `tokens`' last `n` tokens (in the prompt or the output so far); empty without one."""
    if k <= 0 or len(tokens) <= n:
        return []
    ids = torch.as_tensor(tokens, dtype=torch.long)
    # Windows starting at 0 .. len-n-1: every n-gram but the tail itself, each with a token after it.
    windows = ids[:-1].unfold(0, n, 1)
    hits = (windows == ids[-n:]).all(dim=1).nonzero()
    if hits.numel() == 0:
        return []
    start = int(hits[-1]) + n
    return list(tokens[start : start + k])


class PromptLookup:
    """N-gram drafting: an agent's reply copies spans of its context (a tool output it quotes, an
    earlier turn), so what followed the reply's last `n` tokens before is a likely continuation.
    Costs one vectorised scan of the sequence per step and no model forward."""

    def __init__(self, n: int) -> None:
        self.n = n

    def propose(self, seqs: Seq[Sequence], budgets: Seq[int]) -> list[Draft]:
        return [Draft(lookup(seq.token_ids, self.n, budget)) for seq, budget in zip(seqs, budgets)]
