"""SpeculativeConfig: whether and how an engine drafts tokens for the target to verify.

`method` names the drafter (`engine.speculative.drafters`): `off` decodes one token per step;
`ngram` (prompt lookup) proposes the tokens that followed the most recent earlier occurrence of
the sequence's last `ngram` tokens, which is where an agent's reply copies from a tool output or
an earlier turn; `draft` runs a smaller model with the target's tokenizer: the target's first
`draft_layers` layers and its head (self-speculation, `engine.speculative.early_exit`). Up to `k`
draft tokens per sequence and step. Torch-free, validated once.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from agentserve.common.config import check_choice, choices_of

SpeculativeMethod = Literal["off", "ngram", "draft"]
SPECULATIVE_METHODS = choices_of(SpeculativeMethod)


@dataclass(frozen=True)
class SpeculativeConfig:
    method: SpeculativeMethod = "off"
    k: int = 4  # draft tokens per sequence and step, at most
    ngram: int = 3  # prompt lookup: how many trailing tokens must match an earlier span
    draft_layers: int = 0  # draft: the target's leading layers the draft runs; 0 = half of them

    def __post_init__(self) -> None:
        check_choice("speculative method", self.method, SpeculativeMethod)
        if not isinstance(self.k, int) or isinstance(self.k, bool) or not 1 <= self.k <= 32:
            raise ValueError(f"speculative k must be an integer in [1, 32], got {self.k!r}")
        if not isinstance(self.ngram, int) or isinstance(self.ngram, bool) or self.ngram < 1:
            raise ValueError(f"speculative ngram must be a positive integer, got {self.ngram!r}")
        if not isinstance(self.draft_layers, int) or isinstance(self.draft_layers, bool) or self.draft_layers < 0:
            raise ValueError(f"speculative draft_layers must be an integer >= 0, got {self.draft_layers!r}")

    @property
    def enabled(self) -> bool:
        return self.method != "off"
