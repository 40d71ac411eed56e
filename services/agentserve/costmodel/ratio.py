"""Cache-compute ratio: GB of KV a prefill loads per PFLOP it computes, for one agent turn.

A turn's prompt of `context_tokens` ends in `new_tokens` appended since the last turn; the rest is a
cache hit loaded from the store (hit ratio = cached / context). DualPath (2025) quotes ~22 GB/PFLOP
for DeepSeek-V3.2 at 98.7% hit, 32.7K context and 429 new tokens per turn: at that ratio a GPU's
share of one storage NIC, not its compute, bounds prefill.
"""

from __future__ import annotations

from dataclasses import dataclass

from agentserve.costmodel.models import TargetModel


@dataclass(frozen=True)
class TurnShape:
    context_tokens: int
    new_tokens: int

    def __post_init__(self) -> None:
        if self.context_tokens <= 0:
            raise ValueError(f"context_tokens must be positive, got {self.context_tokens}")
        if not 0 < self.new_tokens <= self.context_tokens:
            raise ValueError(f"new_tokens must be in 1..context_tokens ({self.context_tokens}), got {self.new_tokens}")

    @classmethod
    def from_hit_ratio(cls, context_tokens: int, hit_ratio: float) -> TurnShape:
        """The turn whose cached share of `context_tokens` is `hit_ratio` (at least one new token)."""
        if not 0 <= hit_ratio < 1:
            raise ValueError(f"hit_ratio must be in [0, 1), got {hit_ratio}")
        return cls(context_tokens, max(1, context_tokens - round(hit_ratio * context_tokens)))

    @property
    def cached_tokens(self) -> int:
        return self.context_tokens - self.new_tokens

    @property
    def hit_ratio(self) -> float:
        return self.cached_tokens / self.context_tokens


PAPER_TURN = TurnShape(context_tokens=32_700, new_tokens=429)  # DualPath's DeepSeek-V3.2 agent trace


@dataclass(frozen=True)
class CacheComputeRatio:
    model: str
    turn: TurnShape
    kv_bytes_loaded: float
    prefill_flops: float

    @property
    def gb_per_pflop(self) -> float:
        return (self.kv_bytes_loaded / 1e9) / (self.prefill_flops / 1e15)

    def to_dict(self) -> dict[str, float | int | str]:
        return {
            "model": self.model,
            "context_tokens": self.turn.context_tokens,
            "new_tokens": self.turn.new_tokens,
            "hit_ratio": round(self.turn.hit_ratio, 4),
            "kv_gb_loaded": round(self.kv_bytes_loaded / 1e9, 4),
            "prefill_tflops": round(self.prefill_flops / 1e12, 3),
            "cache_compute_gb_per_pflop": round(self.gb_per_pflop, 2),
        }


def cache_compute_ratio(model: TargetModel, turn: TurnShape) -> CacheComputeRatio:
    return CacheComputeRatio(
        model.key,
        turn,
        kv_bytes_loaded=float(turn.cached_tokens * model.kv_bytes_per_token),
        prefill_flops=model.prefill_flops(turn.cached_tokens, turn.new_tokens),
    )
