"""Synthetic multi-agent workloads: teams of agents with growing contexts, tool calls and rounds.

Patterns, per team:
- `independent`: `agents` unrelated sessions of `turns` turns.
- `fanout`: a lead and `agents` workers. In round r the lead's turn r hands out work, every worker's
  turn r waits for it, and the lead's turn r+1 gathers all workers' turn r (the lead has one more
  turn than there are rounds).
- `allgather`: `agents` peers; every peer's turn r+1 waits for all peers' turn r and receives the
  same gathered content (all peers' outputs), as in TokenDance's all-gather rounds.

Every session may start from a shared system prompt (`system_tokens`). Later turns add about
`new_tokens` each (uniform within +-50%), so context grows by that plus the output every turn.
After a turn, with probability `tool_prob`, the agent calls a tool for a time drawn from
`tool_time` ("const:1", "exp:MEAN", "uniform:LO,HI", "lognormal:MEDIAN,SIGMA"). Teams arrive as
a Poisson process of `arrival_rate` per second (0: all at once).
"""

from __future__ import annotations

import math
import random
from collections.abc import Callable
from dataclasses import dataclass

from agentserve.bench.common.workloads.model import Session, ToolCall, Turn, Workload

PATTERNS = ("independent", "fanout", "allgather")
SYSTEM_PREFIX = "system"


def parse_distribution(spec: str) -> Callable[[random.Random], float]:
    """A sampler `f(rng) -> seconds` for a tool-time spec."""
    kind, _, params = spec.partition(":")
    try:
        values = [float(v) for v in params.split(",")] if params else []
    except ValueError:
        raise ValueError(f"bad distribution parameters in {spec!r}") from None
    expected = {"const": 1, "exp": 1, "uniform": 2, "lognormal": 2}
    if kind not in expected or len(values) != expected[kind] or any(v < 0 for v in values):
        raise ValueError(
            f"tool time must be const:X, exp:MEAN, uniform:LO,HI or lognormal:MEDIAN,SIGMA "
            f"with non-negative numbers, got {spec!r}"
        )
    if kind == "const":
        return lambda rng: values[0]
    if kind == "exp":
        return lambda rng: rng.expovariate(1 / values[0]) if values[0] > 0 else 0.0
    if kind == "uniform":
        lo, hi = sorted(values)
        return lambda rng: rng.uniform(lo, hi)
    return lambda rng: rng.lognormvariate(math.log(max(values[0], 1e-9)), values[1])


@dataclass(frozen=True)
class GeneratorSpec:
    teams: int = 4
    agents: int = 3
    turns: int = 4
    pattern: str = "fanout"
    system_tokens: int = 2048
    first_tokens: int = 1024
    new_tokens: int = 256
    output_tokens: int = 128
    tool_prob: float = 0.5
    tool_time: str = "exp:2.0"
    arrival_rate: float = 0.0
    seed: int = 0

    def __post_init__(self) -> None:
        if self.pattern not in PATTERNS:
            raise ValueError(f"pattern must be one of {PATTERNS}, got {self.pattern!r}")
        for name in ("teams", "agents", "turns", "first_tokens", "new_tokens", "output_tokens"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be >= 1, got {getattr(self, name)}")
        if self.system_tokens < 0 or self.arrival_rate < 0 or not 0 <= self.tool_prob <= 1:
            raise ValueError("system_tokens and arrival_rate must be >= 0, tool_prob in [0, 1]")
        parse_distribution(self.tool_time)


class _Team:
    def __init__(self, spec: GeneratorSpec, rng: random.Random, team: int, arrival: float) -> None:
        self.spec, self.rng, self.arrival = spec, rng, arrival
        self.tool_time = parse_distribution(spec.tool_time)
        self.name = f"t{team:03d}"

    def turn(
        self,
        first: bool,
        last: bool,
        after: tuple[str, ...] = (),
        new_tokens: int | None = None,
        content_key: str | None = None,
    ) -> Turn:
        s, rng = self.spec, self.rng
        if new_tokens is None:
            base = s.first_tokens if first else s.new_tokens
            new_tokens = max(1, round(base * rng.uniform(0.5, 1.5)))
        tools: tuple[ToolCall, ...] = ()
        if not last and rng.random() < s.tool_prob:
            tools = (ToolCall("tool", round(self.tool_time(rng), 3)),)
        return Turn(
            output_tokens=s.output_tokens, new_tokens=new_tokens, tools=tools, after=after, content_key=content_key
        )

    def session(self, sid: str, agent: str, turns: list[Turn]) -> Session:
        prefix = SYSTEM_PREFIX if self.spec.system_tokens else None
        return Session(sid, tuple(turns), arrival_s=self.arrival, agent=agent, tenant="generated", prefix=prefix)

    def sessions(self) -> list[Session]:
        s, T, N = self.spec, self.spec.turns, self.spec.agents
        if s.pattern == "independent":
            return [
                self.session(f"{self.name}-a{i}", f"agent{i}", [self.turn(r == 0, r == T - 1) for r in range(T)])
                for i in range(N)
            ]
        workers = [f"{self.name}-w{i}" for i in range(N)]
        if s.pattern == "fanout":
            lead = f"{self.name}-lead"
            lead_turns = [
                self.turn(r == 0, r == T, after=tuple(f"{w}#{r - 1}" for w in workers) if r else ())
                for r in range(T + 1)
            ]
            out = [self.session(lead, "lead", lead_turns)]
            out += [
                self.session(w, "worker", [self.turn(r == 0, r == T - 1, after=(f"{lead}#{r}",)) for r in range(T)])
                for w in workers
            ]
            return out
        gathered = N * s.output_tokens
        return [
            self.session(
                w,
                "peer",
                [
                    self.turn(True, T == 1)
                    if r == 0
                    else self.turn(
                        False,
                        r == T - 1,
                        after=tuple(f"{o}#{r - 1}" for o in workers if o != w),
                        new_tokens=gathered,
                        content_key=f"{self.name}-gather-{r - 1}",
                    )
                    for r in range(T)
                ],
            )
            for w in workers
        ]


def generate(spec: GeneratorSpec) -> Workload:
    rng = random.Random(spec.seed)
    sessions: list[Session] = []
    arrival = 0.0
    for team in range(spec.teams):
        if spec.arrival_rate > 0 and team > 0:
            arrival += rng.expovariate(spec.arrival_rate)
        sessions += _Team(spec, rng, team, round(arrival, 3)).sessions()
    prefixes = {SYSTEM_PREFIX: spec.system_tokens} if spec.system_tokens else {}
    name = f"generated-{spec.pattern}-{spec.teams}x{spec.agents}x{spec.turns}"
    return Workload(name=name, sessions=tuple(sessions), source="generator", prefixes=prefixes).validate()
