"""The agent workload every policy of `bench dualpath` serves: independent agents whose context
grows turn by turn, as in DualPath's agentic traces (long contexts, short appends, high hit).

An agent's first turn sends `first_context` tokens: a system prompt and tool definitions every
agent shares (`shared_prefix` tokens, cached before the run as a deployment has them) and its own
task and files (the rest, a miss). Every later turn appends the previous turn's output and a
short message (a tool result, an observation), so its prompt is the whole context so far plus
the message, and everything but the message is a cache hit. Appends are drawn uniformly within
+-50% of their mean and then rescaled so that the last turn's prompt is exactly `final_context`:
every agent reaches the stated context.

Lengths are the target model's tokens. Emulated engines take every token id at face value (ids
are arbitrary ints; no tokenizer), so a 32K-token prompt is 32K ids on the wire.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, replace

from agentserve.bench.common.workloads.model import Session, Turn, Workload

SHARED_PREFIX = "system"


@dataclass(frozen=True)
class AgentWorkloadSpec:
    agents: int = 16
    turns: int = 30
    first_context: int = 16384  # the first turn's prompt
    final_context: int = 32768  # the last turn's prompt
    output_tokens: int = 16  # per turn
    shared_prefix: int = 8192  # of the first context, shared by every agent and cached before the run
    seed: int = 0

    def __post_init__(self) -> None:
        for name in ("agents", "turns", "first_context", "output_tokens"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be >= 1, got {getattr(self, name)}")
        if not 0 <= self.shared_prefix < self.first_context:
            raise ValueError(
                f"shared_prefix must be in [0, first_context) (the first turn adds a task of its own), "
                f"got {self.shared_prefix} with first_context {self.first_context}"
            )
        if self.turns < 2:
            raise ValueError(f"turns must be >= 2 (a later turn is where the context is reused), got {self.turns}")
        growth = self.final_context - self.first_context
        if growth < (self.turns - 1) * (self.output_tokens + 1):
            raise ValueError(
                f"final_context {self.final_context} leaves under one new token a turn after the "
                f"{self.output_tokens}-token outputs: raise it or lower turns/output_tokens "
                f"(needs >= {self.first_context + (self.turns - 1) * (self.output_tokens + 1)})"
            )

    @property
    def mean_append(self) -> float:
        """New tokens a later turn sends besides the previous output, on average."""
        return (self.final_context - self.first_context) / (self.turns - 1) - self.output_tokens

    def to_dict(self) -> dict[str, int | float]:
        return {
            "agents": self.agents,
            "turns_per_agent": self.turns,
            "first_context_tokens": self.first_context,
            "final_context_tokens": self.final_context,
            "mean_append_tokens": round(self.mean_append, 1),
            "output_tokens_per_turn": self.output_tokens,
            "shared_prefix_tokens": self.shared_prefix,
            "seed": self.seed,
        }


def appends(spec: AgentWorkloadSpec, rng: random.Random) -> list[int]:
    """New tokens of turns 1..turns-1: each >= 1, summing to exactly the growth the outputs leave."""
    total = round(spec.mean_append * (spec.turns - 1))
    draws = [rng.uniform(0.5, 1.5) for _ in range(spec.turns - 1)]
    scale = total / sum(draws)
    out = [max(1, int(d * scale)) for d in draws]
    # Flooring loses a few tokens; the largest appends take them back so the sum is exact.
    for i in sorted(range(len(out)), key=lambda i: -out[i])[: total - sum(out)]:
        out[i] += 1
    return out


def generate(spec: AgentWorkloadSpec, label: str = "agent") -> Workload:
    """`spec`'s agents as sessions `<label>0000`, `<label>0001`, ...: a session's token content is
    drawn from its id, so agents under different labels share nothing but the shared prefix."""
    rng = random.Random(spec.seed)
    sessions = []
    prefix = SHARED_PREFIX if spec.shared_prefix else None
    for a in range(spec.agents):
        first = Turn(output_tokens=spec.output_tokens, new_tokens=spec.first_context - spec.shared_prefix)
        later = [Turn(output_tokens=spec.output_tokens, new_tokens=n) for n in appends(spec, rng)]
        sessions.append(Session(f"{label}{a:04d}", (first, *later), agent="agent", tenant="dualpath", prefix=prefix))
    name = f"dualpath-agents-{spec.agents}x{spec.turns}-{spec.first_context}to{spec.final_context}"
    prefixes = {SHARED_PREFIX: spec.shared_prefix} if spec.shared_prefix else {}
    return Workload(name=name, sessions=tuple(sessions), source="bench dualpath", prefixes=prefixes).validate()


def late_turns(spec: AgentWorkloadSpec, agents: int, turns: int) -> AgentWorkloadSpec:
    """Agents that run the last `turns` turns of `spec`'s trajectories, for an online probe that
    cannot wait for whole ones (at time dilation 10 a 30-turn agent lives ~3 local minutes): every
    turn appends what a turn of `spec` does on average and the last prompt is `final_context`, so
    a probe's turns have the hit ratio and context of an offline agent's late turns. The context
    they start from stands for the history so far and is a prefix every online agent shares,
    cached before the run (agents differ from their first own message on). `turns >= spec.turns`:
    `spec`'s own agents."""
    if turns >= spec.turns:
        return replace(spec, agents=agents, seed=spec.seed + 1)
    own = max(1, round(spec.mean_append))  # the first turn's own message: one turn's append
    first = spec.final_context - round((spec.mean_append + spec.output_tokens) * (turns - 1))
    return replace(spec, agents=agents, turns=turns, first_context=first, shared_prefix=first - own, seed=spec.seed + 1)


@dataclass(frozen=True)
class WorkloadShape:
    """What a workload asks of the cache, counted from its turns (every turn served in order)."""

    agents: int
    turns: int
    min_turns_per_agent: int
    prompt_tokens: int
    reusable_tokens: int  # the part of each prompt that is the session's context so far
    max_context: int
    min_final_context: int

    @property
    def hit_ratio(self) -> float:
        return self.reusable_tokens / self.prompt_tokens

    def to_dict(self) -> dict[str, int | float]:
        return {
            "agents": self.agents,
            "turns": self.turns,
            "min_turns_per_agent": self.min_turns_per_agent,
            "prompt_tokens": self.prompt_tokens,
            "reusable_tokens": self.reusable_tokens,
            "hit_ratio": round(self.hit_ratio, 4),
            "max_context_tokens": self.max_context,
            "min_final_context_tokens": self.min_final_context,
        }


def shape(workload: Workload) -> WorkloadShape:
    """Prompt and reusable tokens of every turn of a context-based workload: a turn's prompt is
    the context (shared prefix, then previous prompt and output) plus its new tokens."""
    prompt = reusable = max_context = 0
    finals = []
    for s in workload.sessions:
        context = workload.prefixes[s.prefix] if s.prefix is not None else 0
        for t in s.turns:
            if t.hash_based or t.reuse_tokens is not None:
                raise ValueError(f"session {s.id}: shape() counts whole-context turns only")
            length = context + t.new_tokens
            prompt += length
            reusable += context
            max_context = max(max_context, length)
            context = length + t.output_tokens
        finals.append(context - s.turns[-1].output_tokens)
    return WorkloadShape(
        agents=len(workload.sessions),
        turns=workload.num_turns,
        min_turns_per_agent=min(len(s.turns) for s in workload.sessions),
        prompt_tokens=prompt,
        reusable_tokens=reusable,
        max_context=max_context,
        min_final_context=min(finals),
    )
