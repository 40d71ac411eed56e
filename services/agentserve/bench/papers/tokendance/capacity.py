"""Concurrent agents within an SLO at one memory budget: prefix caching, per-request
position-independent reuse (PIC) and collective reuse, at target scale.

Times come from the cost model the emulated engines sleep (`costmodel.timing.ComputeCost`: a
prefill of `new` tokens after `cached` ones takes prefill_flops / (dense FLOP/s x MFU)); the
memory budget is the target GPUs' KV capacity (`costmodel.kv_capacity`). One engine (one
replica) serves a round; the round's N agents arrive together and are prefilled in turn.

Per agent of round r, with history h (its prefix-cached context), p private tokens of the round,
S = N x o gathered tokens (N blocks of o), fraction f recomputed, L layers, F full layers:

    prefix caching:  prefill(h, p + S)                                   (no block is a prefix hit)
    blend:           prefill(h, p + S) x F/L  +  prefill(h + (1-f)S, p + fS) x (L-F)/L
    PIC:             N x prefill(0, o)  +  blend       (each request computes the masters it holds alone)
    collective:      the round's first agent as prefix caching (computed in full, its KV of the
                     blocks becomes their masters), every later one a blend

    TTFT of the i-th agent = the sum of the prefills before it and its own

KV resident at the end of round r (every agent's context and output, for its decode):

    prefix caching:  sum of full contexts
    PIC:             sum of full contexts + the round's masters (its block cache)
    collective:      private tokens in full + every shared token at the measured diff share
                     (diff bytes / full bytes, from the storage measurement) + every round's masters

An agent count is served within the SLO when every agent of every round meets the TTFT SLO and the
KV fits; `max_agents` is the largest such count.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import asdict, dataclass, replace

from agentserve.bench.papers.tokendance.workload import AgentRound, RoundShape, rounds
from agentserve.contracts.segments import DEFAULT_RECOMPUTE_FRACTION
from agentserve.costmodel.gpus import target_gpu
from agentserve.costmodel.kv_capacity import kv_capacity_blocks
from agentserve.costmodel.models import target_model
from agentserve.costmodel.timing import ComputeCost

METHODS = ("prefix", "pic", "collective")
BLOCK_TOKENS = 16


@dataclass(frozen=True)
class CapacitySpec:
    target_model: str = "qwen2.5-32b"
    target_gpu: str = "h100"
    kv_gpus: int = 8  # the memory budget: this many GPUs' KV capacity
    slo_s: float = 20.0  # every agent's time to first token in every round
    recompute_fraction: float = DEFAULT_RECOMPUTE_FRACTION
    full_layers: int = 1
    diff_share: float = 0.15  # stored bytes of a sibling over its full copy (from the storage measurement)
    max_agents: int = 512

    def __post_init__(self) -> None:
        if self.kv_gpus < 1 or self.max_agents < 1:
            raise ValueError("kv_gpus and max_agents must be >= 1")
        if not self.slo_s > 0:
            raise ValueError(f"slo_s must be positive, got {self.slo_s}")
        for name in ("recompute_fraction", "diff_share"):
            if not 0 <= getattr(self, name) <= 1:
                raise ValueError(f"{name} must be in [0, 1], got {getattr(self, name)}")

    def cost(self) -> ComputeCost:
        return ComputeCost(target_model(self.target_model), target_gpu(self.target_gpu))

    def budget_tokens(self) -> int:
        return kv_capacity_blocks(self.cost(), BLOCK_TOKENS) * BLOCK_TOKENS * self.kv_gpus


@dataclass(frozen=True)
class RoundCost:
    method: str
    round_index: int
    max_ttft_s: float
    prefill_s: float  # the whole round's prefill time
    kv_tokens: float  # KV resident at the end of the round, in full-token equivalents


class RoundCosts:
    def __init__(self, spec: CapacitySpec) -> None:
        self.spec = spec
        self.cost = spec.cost()
        self.layers = self.cost.model.layers

    def prefill(self, cached: float, new: float) -> float:
        return self.cost.prefill_s(round(cached), round(new))

    def full_s(self, a: AgentRound) -> float:
        """The round's tokens computed in full after the prefix-cached history."""
        return self.prefill(a.history_tokens, a.private_tokens + a.shared_tokens)

    def blend_s(self, a: AgentRound) -> float:
        f, full = self.spec.recompute_fraction, self.spec.full_layers / self.layers
        new = a.private_tokens + a.shared_tokens
        recomputed = a.private_tokens + f * a.shared_tokens
        return self.prefill(a.history_tokens, new) * full + self.prefill(
            a.history_tokens + (1 - f) * a.shared_tokens, recomputed
        ) * (1 - full)

    def masters_s(self, a: AgentRound) -> float:
        return len(a.block_order) * self.prefill(0, a.output_tokens)

    def round(self, method: str, agents: list[AgentRound], shared_so_far: int) -> RoundCost:
        """`shared_so_far`: the gathered tokens of every round up to this one (the masters kept)."""
        first = agents[0]
        if method == "prefix":
            each = [self.full_s(a) for a in agents]
        elif method == "pic":
            each = [self.masters_s(a) + self.blend_s(a) for a in agents]
        elif method == "collective":
            each = [self.full_s(first)] + [self.blend_s(a) for a in agents[1:]]
        else:
            raise ValueError(f"method must be one of {METHODS}, got {method!r}")
        total, ttft = 0.0, 0.0
        for seconds in each:
            total += seconds
            ttft = max(ttft, total)
        full = sum(a.prompt_tokens + a.output_tokens for a in agents)
        if method == "prefix":
            kv = float(full)
        elif method == "pic":
            kv = float(full + first.shared_tokens)
        else:
            shared = sum(a.history_shared_tokens + a.shared_tokens for a in agents)
            kv = (full - shared) + shared * self.spec.diff_share + shared_so_far
        return RoundCost(method, first.round_index, ttft, total, kv)


@dataclass(frozen=True)
class Capacity:
    method: str
    max_agents: int  # the most agents served within the SLO and the budget (0: not even one)
    limited_by: str  # "slo" or "memory": what the next agent count breaks first
    at_max: list[RoundCost]

    def as_dict(self) -> dict:
        return asdict(self)


def capacity(shape_for: Callable[[int], RoundShape], spec: CapacitySpec, method: str) -> Capacity:
    """Binary-search the largest agent count whose rounds all meet the SLO within the budget
    (both only get worse with more agents: more gathered tokens per prompt, more prompts)."""
    costs, budget = RoundCosts(spec), spec.budget_tokens()

    def check(n: int) -> tuple[str, list[RoundCost]]:
        shape = shape_for(n)
        per_round, shared = [], 0
        for agents in rounds(shape):
            shared += agents[0].shared_tokens
            per_round.append(costs.round(method, agents, shared))
        if any(r.max_ttft_s > spec.slo_s for r in per_round):
            return "slo", per_round
        if any(r.kv_tokens > budget for r in per_round):
            return "memory", per_round
        return "", per_round

    low, high, best = 0, spec.max_agents, []
    limit = "max_agents"
    while low < high:
        mid = (low + high + 1) // 2
        broken, per_round = check(mid)
        if broken:
            high, limit = mid - 1, broken
        else:
            low, best = mid, per_round
    if low < spec.max_agents:
        limit = check(low + 1)[0] or limit
    return Capacity(method, low, limit, best)


def with_fraction(spec: CapacitySpec, fraction: float, diff_share: float) -> CapacitySpec:
    return replace(spec, recompute_fraction=fraction, diff_share=diff_share)
