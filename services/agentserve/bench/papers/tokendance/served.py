"""Concurrent agents within an SLO, served on the real engine: prefix caching, per-request
position-independent reuse (PIC) and collective reuse, at one KV budget.

Every policy serves the workload's gather rounds on the trained default model (the engine's
prefill arithmetic, `engine.shared_context.CollectiveReuse`, as `engine_round.py` times the round
prefill), at a token scale, for increasing agent counts. A round's agents arrive together and are
prefilled in turn; the round latency is its last agent's time to first token. Each agent keeps
its context's KV for the next round (a prefix-cache hit) while the budget holds it:

    prefix      the prompt after the cached history, computed in full (no gathered block is a
                prefix hit: each follows a private history)
    pic         a chunk cache, as CacheBlend and EPIC run it: each of the round's blocks computed
                alone once (by the round's first agent, all blocks in one forward per layer),
                every agent's prompt a blended prefill against them, on its own
    collective  the round's first agent computed in full (its KV of the blocks: the masters),
                every later one a blended prefill against those masters

KV resident, in full-token equivalents (what the budget holds):

    prefix, pic   every agent's full context (pic also its round's chunk cache, one master per block)
    collective    every agent's private tokens in full, its gathered tokens at the diff share
                  (stored bytes of a sibling over its full copy: the storage measurement), and
                  every round's masters (never evicted before their siblings)

When an agent's new context does not fit, whole contexts are evicted, the one used furthest in
the future first (with agents in turn: the most recently served; Belady's choice, the best a
cache can do), and an evicted agent's next prompt is computed from its first token.

The regime, unless given, from prefix caching serving the workload's own agent count with every
context resident (its calibration): the SLO is its worst round latency, and the KV budget is
`budget_fraction` of the KV it holds at the end (its full residency), 0.5 by default: the budget
holds the contexts of half the workload's agents under prefix caching. Why half: TokenDance's
claim is more agents under an SLO on the same GPU memory, a deployment where KV memory, not
compute, limits how many agents the baseline keeps resident. At a budget of its full residency
prefix caching fits every agent by construction and only latency can bind, which does not test
the claim; half is the first point of the sweep (1, 1/2, 1/4) where memory binds for the
baseline, fixed before any measurement. The SLO is the same at every budget and for every policy
(the baseline's latency with nothing evicted), and so is the budget: no side is loosened or
shrunk alone. Latency is the engine thread's CPU time (equal to wall time on an idle core; this
machine's cores are shared with other work, and its wall time would measure that).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field, replace
from typing import TYPE_CHECKING

import torch

from agentserve.bench.common.workloads.tokens import TokenSynth
from agentserve.bench.papers.tokendance.workload import RoundShape, first_turn_tokens, rounds
from agentserve.contracts.segments import (
    DEFAULT_RECOMPUTE_FRACTION,
    PrivateSegment,
    ReusePolicy,
    SegmentedPrompt,
    SharedBlock,
)
from agentserve.engine.shared_context import CollectiveReuse, MasterKV, PrefixKV

if TYPE_CHECKING:
    from agentserve.engine.model import CausalLM

POLICIES = ("prefix", "pic", "collective")
# Agent counts probed, as multiples of the workload's own count: upward until the SLO breaks,
# then halfway between the last count met and the first missed.
GROWTH = (0.5, 0.75, 1.0, 1.25, 1.5, 2.0, 2.5, 3.0, 3.5, 4.0)
# KV budgets, as fractions of prefix caching's full-residency KV at the workload's agent count:
# the default (memory binds for the baseline; the module docstring says why half) and the sweep.
DEFAULT_BUDGET_FRACTION = 0.5
BUDGET_SWEEP = (1.0, 0.5, 0.25)


@dataclass(frozen=True)
class ServedSpec:
    # Every token count divided by this: blocks of 8 (GenerativeAgents) and 4 (AgentSociety) tokens, so a
    # block recomputes 1 token of 8 or 4 at the default fraction (at 32: of 4 or 2, whatever the fraction).
    token_scale: int = 16
    recompute_fraction: float = DEFAULT_RECOMPUTE_FRACTION
    slo_s: float | None = None  # None: prefix caching's worst round latency at the workload's agent count
    budget_tokens: float | None = None  # None: budget_fraction x prefix caching's full-residency KV
    budget_fraction: float = DEFAULT_BUDGET_FRACTION  # the headline budget, of prefix caching's full residency
    budget_sweep: tuple[float, ...] = ()  # further budget fractions measured and reported beside it
    diff_share: float = 0.2  # a sibling's stored bytes over its full copy

    def __post_init__(self) -> None:
        if self.token_scale < 1:
            raise ValueError(f"token_scale must be >= 1, got {self.token_scale}")
        if not 0 <= self.recompute_fraction < 1:
            raise ValueError(f"recompute_fraction must be in [0, 1), got {self.recompute_fraction}")
        if self.slo_s is not None and not self.slo_s > 0:
            raise ValueError(f"slo_s must be positive, got {self.slo_s}")
        if self.budget_tokens is not None and not self.budget_tokens > 0:
            raise ValueError(f"budget_tokens must be positive, got {self.budget_tokens}")
        for fraction in (self.budget_fraction, *self.budget_sweep):
            if not 0 < fraction <= 1:
                raise ValueError(f"budget_fraction and budget_sweep must be in (0, 1], got {fraction}")
        if self.budget_tokens is not None and self.budget_sweep:
            raise ValueError("budget_sweep is a sweep over fractions: it cannot be given with budget_tokens")
        if not 0 <= self.diff_share <= 1:
            raise ValueError(f"diff_share must be in [0, 1], got {self.diff_share}")

    def budget_fractions(self) -> list[float]:
        """The budgets measured, largest first (the headline's among them)."""
        return sorted({self.budget_fraction, *self.budget_sweep}, reverse=True)


@dataclass(frozen=True)
class RoundServed:
    round_index: int
    latency_s: float  # the round's prefills, agents in turn: its last agent's time to first token
    computed_tokens: int  # tokens run through every layer, evicted histories recomputed included
    recomputed_history_tokens: int  # of those, history tokens whose KV had been evicted
    kv_tokens: float  # KV resident at the end of the round, full-token equivalents
    evictions: int  # contexts evicted during the round
    agents_served: int  # a round stops at the agent that takes it past the SLO (its latency: a lower bound)


@dataclass(frozen=True)
class Probe:
    policy: str
    agents: int
    met: bool  # every round within the SLO (a probe stops at the first agent past it)
    rounds: list[RoundServed]

    @property
    def worst_latency_s(self) -> float:
        return max(r.latency_s for r in self.rounds)

    def as_dict(self) -> dict:
        return {**asdict(self), "worst_latency_s": round(self.worst_latency_s, 3)}


class KVLedger:
    """Agents' resident contexts (full-token equivalents) within `budget` beside `fixed` (masters),
    evicting whole contexts furthest-next-use first: with agents served in turn, the most
    recently served before the one admitted."""

    def __init__(self, budget: float, agents: int) -> None:
        self.budget, self.agents = budget, agents
        self.resident: dict[int, float] = {}
        self.fixed = 0.0
        self.evictions = 0

    @property
    def used(self) -> float:
        return self.fixed + sum(self.resident.values())

    def holds(self, agent: int) -> bool:
        return agent in self.resident

    def admit(self, agent: int, cost: float) -> list[int]:
        """Keep `agent`'s context at `cost`; the agents evicted for it (it is dropped itself,
        evicting nobody, when it cannot fit beside the fixed share alone)."""
        self.resident.pop(agent, None)
        if self.fixed + cost > self.budget:
            return [agent]
        evicted = []
        for other in sorted(self.resident, key=lambda b: (agent - b) % self.agents):
            if self.used + cost <= self.budget:
                break
            del self.resident[other]
            evicted.append(other)
        self.resident[agent] = cost
        self.evictions += len(evicted)
        return evicted


def context_cost(policy: str, tokens: int, shared_tokens: int, diff_share: float) -> float:
    """An agent's context of `tokens` (`shared_tokens` of them gathered blocks) in the ledger,
    full-token equivalents: collective holds the gathered tokens at the diff share."""
    if policy == "collective":
        return tokens - shared_tokens + shared_tokens * diff_share
    return float(tokens)


@dataclass
class _Agent:
    tokens: list[int]
    shared_tokens: int = 0  # of `tokens`, gathered blocks
    kv: PrefixKV | None = None
    outputs: list[tuple[int, ...]] = field(default_factory=list)


class RoundServer:
    """One policy serving `shape` (already at its token scale) for all its rounds."""

    def __init__(
        self,
        model: CausalLM,
        shape: RoundShape,
        policy: str,
        spec: ServedSpec,
        budget: float,
        clock: Callable[[], float] = time.process_time,
    ):
        if policy not in POLICIES:
            raise ValueError(f"policy must be one of {POLICIES}, got {policy!r}")
        self.shape, self.policy, self.spec = shape, policy, spec
        # No fallback: every policy does the reuse it is timed for, so no deviation estimate
        # either where the selection does not read the deviation (`CollectiveReuse`'s `estimate`).
        self.reuse = CollectiveReuse(model, max_deviation=None, estimate=False)
        self.ledger = KVLedger(budget, shape.agents)
        self.clock = clock
        self.synth = TokenSynth()
        self.reuse_policy = ReusePolicy(recompute_fraction=spec.recompute_fraction)
        self.masters: dict[str, MasterKV] = {}

    def serve(self, slo_s: float) -> Probe:
        shape, n = self.shape, self.shape.agents
        agents = [
            _Agent(list(self.synth.content(f"{shape.name}/agent{a}/first", t)))
            for a, t in enumerate(first_turn_tokens(shape))
        ]
        for a, agent in enumerate(agents):  # every agent's first turn, untimed and the same for every policy
            agent.outputs.append(tuple(self.synth.content(f"{shape.name}/r0/out{a}", shape.output_tokens)))
            _, k, v = self.reuse.full(agent.tokens)
            agent.kv = PrefixKV(k, v)
            self._admit(a, agents)
        served = []
        for agent_rounds in rounds(shape):
            r = agent_rounds[0].round_index
            blocks = [SharedBlock(f"{shape.name}/r{r}/agent{a}", r, agents[a].outputs[-1]) for a in range(n)]
            evictions_before = self.ledger.evictions
            if self.policy == "pic":
                self.ledger.fixed = n * shape.output_tokens  # the round's chunk cache: one master per block
                self.masters = {}  # a prompt holds its own round's blocks only
            latency = 0.0
            computed = recomputed = agents_served = 0
            for a, plan in enumerate(agent_rounds):
                if latency > slo_s:
                    break  # the round has missed the SLO: the agents after would only add to it
                agent = agents[a]
                private = list(agent.outputs[-1]) + self.synth.content(
                    f"{shape.name}/agent{a}/r{r}", plan.private_tokens
                )
                prompt = SegmentedPrompt(
                    (PrivateSegment((*agent.tokens, *private)), *(blocks[b] for b in plan.block_order)),
                    self.reuse_policy,
                )
                prefix = agent.kv if self.ledger.holds(a) else None
                if prefix is None:
                    recomputed += len(agent.tokens)
                started = self.clock()
                k, v, tokens_run = self._prefill(prompt, prefix)
                latency += self.clock() - started
                computed += tokens_run
                agent.tokens = list(prompt.token_ids)
                agent.shared_tokens += sum(len(blocks[b].token_ids) for b in plan.block_order)
                agent.kv = PrefixKV(k, v)
                agent.outputs.append(tuple(self.synth.content(f"{shape.name}/r{r}/out{a}", shape.output_tokens)))
                self._admit(a, agents)
                agents_served += 1
            served.append(
                RoundServed(
                    r,
                    round(latency, 4),
                    computed,
                    recomputed,
                    round(self.ledger.used, 1),
                    self.ledger.evictions - evictions_before,
                    agents_served,
                )
            )
            if latency > slo_s:
                return Probe(self.policy, n, False, served)
        return Probe(self.policy, n, True, served)

    def _prefill(self, prompt: SegmentedPrompt, prefix: PrefixKV | None) -> tuple[torch.Tensor, torch.Tensor, int]:
        """The prompt's KV and how many tokens ran through every layer."""
        cached = prefix.num_tokens if prefix is not None else 0
        if self.policy == "prefix":
            _, k, v = self.reuse.full(prompt.token_ids, prefix)
            return k, v, len(prompt.token_ids) - cached
        if self.policy == "pic":
            result = self.reuse.prefill_round([prompt], self.masters, share_masters=False, prefixes=[prefix])
        else:
            round_index = prompt.shared_spans()[0].block.round_index
            for content_id in [c for c, m in self.masters.items() if m.block.round_index < round_index]:
                del self.masters[
                    content_id
                ]  # a prompt holds its own round's blocks only (the ledger still counts them)
            result = self.reuse.prefill_round([prompt], self.masters, prefixes=[prefix])
            self.ledger.fixed += result.master_tokens  # masters made by this prompt (a round's leader)
        prefill = result.prefills[0]
        return prefill.k, prefill.v, prefill.stats.computed_tokens - cached + result.standalone_master_tokens

    def _admit(self, a: int, agents: list[_Agent]) -> None:
        agent = agents[a]
        total = len(agent.tokens) + self.shape.output_tokens  # its output, decoded next, is held too
        cost = context_cost(self.policy, total, agent.shared_tokens, self.spec.diff_share)
        for evicted in self.ledger.admit(a, cost):
            agents[evicted].kv = None  # its KV is gone: the next prompt computes it again


@dataclass(frozen=True)
class Regime:
    slo_s: float
    budget_tokens: float
    calibrated: bool  # from prefix caching at the workload's own agent count (else given)
    budget_fraction: float | None = None  # of prefix caching's full-residency KV (None: given in tokens)


@dataclass(frozen=True)
class Calibration:
    """Prefix caching serving the workload's own agent count with every context resident."""

    probe: Probe

    @property
    def slo_s(self) -> float:
        return self.probe.worst_latency_s

    @property
    def full_kv_tokens(self) -> float:
        return self.probe.rounds[-1].kv_tokens  # contexts only grow: the end is the peak

    def regime(self, spec: ServedSpec, fraction: float) -> Regime:
        """The SLO and the budget at `fraction` of full residency, unless the spec gives them."""
        slo = spec.slo_s if spec.slo_s is not None else self.slo_s
        if spec.budget_tokens is not None:
            return Regime(slo, spec.budget_tokens, spec.slo_s is None)
        return Regime(slo, round(fraction * self.full_kv_tokens, 1), True, fraction)

    def known(self, regime: Regime) -> Probe | None:
        """The calibration's probe as prefix caching's probe in `regime`, when it holds there
        (nothing it kept would have been evicted under the regime's budget)."""
        if self.full_kv_tokens > regime.budget_tokens:
            return None
        return replace(self.probe, met=self.probe.worst_latency_s <= regime.slo_s)


@dataclass(frozen=True)
class ServedCapacity:
    policy: str
    max_agents: int  # the most agents with every round within the SLO (0: none probed met it)
    limited_by: str  # the first count missed: "memory" when evicted contexts were recomputed there, else "slo"
    probes: list[Probe]

    def as_dict(self) -> dict:
        return {
            "policy": self.policy,
            "max_agents": self.max_agents,
            "limited_by": self.limited_by,
            "probes": [p.as_dict() for p in sorted(self.probes, key=lambda p: p.agents)],
        }


def serve(model: CausalLM, shape: RoundShape, policy: str, agents: int, spec: ServedSpec, regime: Regime) -> Probe:
    """`policy` serving `shape` at `agents` agents (token counts at the spec's scale)."""
    scaled = replace(shape, agents=agents).scaled(spec.token_scale)
    return RoundServer(model, scaled, policy, spec, regime.budget_tokens).serve(regime.slo_s)


def calibrate(model: CausalLM, shape: RoundShape, spec: ServedSpec) -> Calibration:
    """Prefix caching serving the workload's own agent count with nothing evicted: the SLO is its
    worst round latency and the budgets are fractions of its KV at the end of the last round."""
    unbounded = Regime(float("inf"), float("inf"), True)
    return Calibration(serve(model, shape, "prefix", shape.agents, spec, unbounded))


def served_capacity(
    model: CausalLM,
    shape: RoundShape,
    policy: str,
    spec: ServedSpec,
    regime: Regime,
    known: Probe | None = None,
    log: Callable[[str], None] = lambda _: None,
) -> ServedCapacity:
    """The largest agent count `policy` serves within the regime: counts of `GROWTH` x the
    workload's own, from it upward while met (downward while missed), then halves the gap
    between the last met and the first missed down to an eighth of the workload's count."""
    probes: dict[int, Probe] = {} if known is None else {known.agents: known}

    def met(n: int) -> bool:
        if n not in probes:
            probes[n] = serve(model, shape, policy, n, spec, regime)
            p = probes[n]
            log(f"{shape.name} {policy} {n} agents: worst round {p.worst_latency_s:.2f} s, met={p.met}")
        return probes[n].met

    counts = sorted({max(1, round(g * shape.agents)) for g in GROWTH})
    i = counts.index(shape.agents)
    if met(counts[i]):
        while i + 1 < len(counts) and met(counts[i + 1]):
            i += 1
        low, high = counts[i], counts[i + 1] if i + 1 < len(counts) else None
    else:
        while i > 0 and not met(counts[i - 1]):
            i -= 1
        low, high = (counts[i - 1] if i > 0 else 0), counts[i]
    step = max(1, shape.agents // 8)
    while high is not None and high - low > step:
        mid = (low + high) // 2
        if met(mid):
            low = mid
        else:
            high = mid
    missed = probes.get(high) if high is not None else None
    limited_by = (
        "max probed"
        if missed is None
        else ("memory" if any(r.recomputed_history_tokens for r in missed.rounds) else "slo")
    )
    return ServedCapacity(policy, low, limited_by, list(probes.values()))
