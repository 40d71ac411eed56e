"""Which waiting prefills one engine step takes: a plain policy, torch-free, shared by the real and
the emulated engines (it sits above the runner).

- `fcfs`: the oldest waiting prefill alone, one per step (the nano-vllm schedule; the baseline).
- `compute-quota`: the oldest waiting prefills, in arrival order, while their summed cost stays
  within `token_budget`. The cost of a prefill is its new tokens, each weighted by the attention it
  does over the cached prefix: `new * (1 + cached / attention_tokens)`, so a new token attending
  over `attention_tokens` cached tokens costs as much as two (0 = count new tokens only). The first
  prefill is always taken, however costly, so no request waits for ever.

The policy never skips a prefill to take a later one (arrival order is kept); the engine stops a
batch at the first prefill the pool cannot admit, and passes over one whose external KV has not
delivered layer 0 yet (as if it were still loading outside the engine).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

PREFILL_BATCHING = ("fcfs", "compute-quota")


def check_prefill_batching(name: str) -> str:
    if name not in PREFILL_BATCHING:
        raise ValueError(f"prefill_batching must be one of {', '.join(PREFILL_BATCHING)}, got {name!r}")
    return name


class PrefillBatchPolicy(Protocol):
    @property
    def name(self) -> str: ...

    def cost(self, new_tokens: int, cached_tokens: int) -> float:
        """The compute one prefill takes, in new-token equivalents."""
        ...

    def fits(self, taken: int, taken_cost: float, cost: float) -> bool:
        """Whether a prefill costing `cost` joins a batch that already holds `taken` prefills
        costing `taken_cost` in all."""
        ...


@dataclass(frozen=True)
class FcfsBatch:
    name: str = "fcfs"

    def cost(self, new_tokens: int, cached_tokens: int) -> float:
        return float(new_tokens)

    def fits(self, taken: int, taken_cost: float, cost: float) -> bool:
        return taken == 0


@dataclass(frozen=True)
class ComputeQuotaBatch:
    token_budget: int
    attention_tokens: int = 0
    name: str = "compute-quota"

    def __post_init__(self) -> None:
        _check_budget(self.token_budget, self.attention_tokens)

    def cost(self, new_tokens: int, cached_tokens: int) -> float:
        if not self.attention_tokens:
            return float(new_tokens)
        return new_tokens * (1.0 + cached_tokens / self.attention_tokens)

    def fits(self, taken: int, taken_cost: float, cost: float) -> bool:
        return taken == 0 or taken_cost + cost <= self.token_budget


def make_prefill_batch_policy(name: str, token_budget: int, attention_tokens: int = 0) -> PrefillBatchPolicy:
    """The policy named `name`; every argument is checked, whichever policy uses it."""
    _check_budget(token_budget, attention_tokens)
    if check_prefill_batching(name) == "fcfs":
        return FcfsBatch()
    return ComputeQuotaBatch(token_budget, attention_tokens)


def select(policy: PrefillBatchPolicy, prefills: list[tuple[int, int]]) -> int:
    """How many leading `(new_tokens, cached_tokens)` prefills one step takes by cost alone."""
    taken, taken_cost = 0, 0.0
    for new_tokens, cached_tokens in prefills:
        cost = policy.cost(new_tokens, cached_tokens)
        if not policy.fits(taken, taken_cost, cost):
            break
        taken, taken_cost = taken + 1, taken_cost + cost
    return taken


def _check_budget(token_budget: int, attention_tokens: int) -> None:
    if not isinstance(token_budget, int) or isinstance(token_budget, bool) or token_budget <= 0:
        raise ValueError(f"prefill_token_budget must be a positive integer, got {token_budget!r}")
    if not isinstance(attention_tokens, int) or isinstance(attention_tokens, bool) or attention_tokens < 0:
        raise ValueError(f"prefill_attention_tokens must be an integer >= 0, got {attention_tokens!r}")
