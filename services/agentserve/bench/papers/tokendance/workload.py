"""The all-gather workloads: GenerativeAgents- and AgentSociety-shaped rounds of agents.

Built on `bench.common.workloads.generator`'s `allgather` pattern (one team of `agents` peers, `rounds`
gather rounds after a first turn): each agent's first turn is its private persona and memory
(`first_tokens`, +-50% per agent, drawn by the generator). In gather round r every agent's turn
appends `private_tokens` of its own (observations, retrieved memories, the round's instruction)
and then the gathered outputs of round r-1: one shared block per agent (`output_tokens` each),
in an order of its own (GenerativeAgents: by distance, here a per-agent shuffle; AgentSociety:
a rotation starting at the agent's neighbours). So every prompt holds the same blocks after a
different private history, at different positions: chained-prefix caching reuses none of them.

    round r prompt of agent a = history_a(r)  +  private_a(r)  +  blocks of round r-1 (a's order)
    history_a(r) = first_a + sum over earlier rounds k of (private_a(k) + gathered(k) + output_a(k))
"""

from __future__ import annotations

import random
from dataclasses import dataclass

from agentserve.bench.common.workloads.generator import GeneratorSpec, generate

ORDERS = ("shuffled", "rotated")


@dataclass(frozen=True)
class RoundShape:
    name: str
    agents: int
    rounds: int  # gather rounds (after every agent's first turn)
    first_tokens: int  # an agent's private persona and memory (the generator draws +-50%)
    private_tokens: int  # private tokens each gather round adds before the gathered blocks
    output_tokens: int  # an agent's output per round: one shared block of the next round
    order: str = "shuffled"
    seed: int = 0

    def __post_init__(self) -> None:
        for name in ("agents", "rounds", "first_tokens", "output_tokens"):
            if getattr(self, name) < 1:
                raise ValueError(f"{self.name}: {name} must be >= 1, got {getattr(self, name)}")
        if self.private_tokens < 0:
            raise ValueError(f"{self.name}: private_tokens must be >= 0, got {self.private_tokens}")
        if self.order not in ORDERS:
            raise ValueError(f"{self.name}: order must be one of {ORDERS}, got {self.order!r}")

    @property
    def gathered_tokens(self) -> int:
        return self.agents * self.output_tokens

    def scaled(self, token_scale: int) -> RoundShape:
        """Every token count divided by `token_scale` (at least 1): the same rounds, shorter."""
        if token_scale < 1:
            raise ValueError(f"token_scale must be >= 1, got {token_scale}")

        def cut(n: int) -> int:
            return max(1, n // token_scale)

        return RoundShape(
            self.name,
            self.agents,
            self.rounds,
            cut(self.first_tokens),
            self.private_tokens // token_scale,
            cut(self.output_tokens),
            self.order,
            self.seed,
        )


def generative_agents(agents: int = 32, rounds: int = 5) -> RoundShape:
    """Smallville-style: long private memory streams, a paragraph of output per agent per round."""
    return RoundShape("generative-agents", agents, rounds, 1024, 256, 128, "shuffled")


def agent_society(agents: int = 64, rounds: int = 5) -> RoundShape:
    """AgentSociety-style: more agents with shorter profiles and messages."""
    return RoundShape("agent-society", agents, rounds, 512, 128, 64, "rotated")


@dataclass(frozen=True)
class AgentRound:
    """What agent `agent`'s prompt holds in gather round `round_index` (1-based)."""

    agent: int
    round_index: int
    history_tokens: int  # the context before this round's tokens (a prefix hit for the agent)
    history_shared_tokens: int  # of those, earlier rounds' gathered blocks
    private_tokens: int  # this round's own tokens, before the blocks
    block_order: tuple[int, ...]  # which agent's output each gathered block is, in prompt order
    output_tokens: int

    @property
    def shared_tokens(self) -> int:
        return len(self.block_order) * self.output_tokens

    @property
    def prompt_tokens(self) -> int:
        return self.history_tokens + self.private_tokens + self.shared_tokens


def first_turn_tokens(shape: RoundShape) -> list[int]:
    """Each agent's first-turn length, as the generator's allgather pattern draws it. The
    generator is asked for first turns only: its later turns would list every peer as a
    dependency (agents^2 references), and their lengths here follow the shape instead."""
    spec = GeneratorSpec(
        teams=1,
        agents=shape.agents,
        turns=1,
        pattern="allgather",
        system_tokens=0,
        first_tokens=shape.first_tokens,
        output_tokens=shape.output_tokens,
        tool_prob=0.0,
        seed=shape.seed,
    )
    sessions = generate(spec).sessions
    return [s.turns[0].new_tokens for s in sessions]


def rounds(shape: RoundShape) -> list[list[AgentRound]]:
    """`shape.rounds` gather rounds of every agent's `AgentRound`."""
    rng = random.Random(shape.seed)
    history = [n + shape.output_tokens for n in first_turn_tokens(shape)]  # first turn and its output
    shared_history = [0] * shape.agents
    out: list[list[AgentRound]] = []
    for r in range(1, shape.rounds + 1):
        this: list[AgentRound] = []
        for a in range(shape.agents):
            if shape.order == "shuffled":
                order = list(range(shape.agents))
                rng.shuffle(order)
            else:
                order = [(a + 1 + i) % shape.agents for i in range(shape.agents)]
            this.append(
                AgentRound(a, r, history[a], shared_history[a], shape.private_tokens, tuple(order), shape.output_tokens)
            )
        for a, agent in enumerate(this):
            history[a] = agent.prompt_tokens + shape.output_tokens
            shared_history[a] += agent.shared_tokens
        out.append(this)
    return out
