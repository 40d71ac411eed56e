"""Agents: each a workload session whose turns follow one another, a tool wait between them.

A turn's prompt is the agent's context so far (the shared prefix, then every earlier prompt and
output) plus its new tokens. Its store hits are what the store holds of that context: the shared
prefix's whole blocks on a first turn (cached before the run, as `bench dualpath` warms it), and
on a later turn the whole context but its last token (the scheduler's stored tail blocks,
`scheduler/tail_blocks.py`), or its whole blocks without them. The tool wait after a turn is drawn
from an exponential distribution of the stated mean, from the run's seed; with no mean
(`tool_wait_s=None`) it is the workload's own: the turn's tool calls, then the next turn's think
time (`Turn.tool_time_s`, `Turn.think_s`), as a trace or a generator recorded them.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import dataclass, field

from agentserve.bench.common.workloads.model import Session as WorkloadSession
from agentserve.bench.common.workloads.model import Workload
from agentserve.scheduler.sessions import Session
from agentserve.sim.events import EventLoop
from agentserve.sim.turn import SimTurn


@dataclass
class Agent:
    spec: WorkloadSession
    session: Session
    arrival_s: float
    tool_waits: list[float]
    context: int  # tokens so far
    next_index: int = 0
    turns: list[SimTurn] = field(default_factory=list)


class Agents:
    def __init__(  # noqa: PLR0913 - the workload, its timing and the two scheduler hooks the agents call
        self,
        loop: EventLoop,
        workload: Workload,
        arrivals: list[float],
        tool_wait_s: float | None,
        seed: int,
        block_size: int,
        tail_blocks: bool,
        submit: Callable[[SimTurn, Session], None],
        rank: Callable[[Session], int],
    ) -> None:
        if len(arrivals) != len(workload.sessions):
            raise ValueError(f"{len(arrivals)} arrival times for {len(workload.sessions)} agents")
        if tool_wait_s is not None and tool_wait_s < 0:
            raise ValueError(f"tool_wait_s must be >= 0 (None: the workload's own waits), got {tool_wait_s}")
        self.loop = loop
        self.block_size = block_size
        self.tail_blocks = tail_blocks
        self.submit = submit
        self.rank = rank
        self._seq = 0
        rng = random.Random(seed)
        self.agents = []
        for spec, at in zip(workload.sessions, arrivals, strict=True):
            prefix = workload.prefixes.get(spec.prefix, 0) if spec.prefix is not None else 0
            if tool_wait_s is None:
                waits = [before.tool_time_s() + after.think_s for before, after in zip(spec.turns, spec.turns[1:])]
            else:
                waits = [rng.expovariate(1 / tool_wait_s) if tool_wait_s else 0.0 for _ in spec.turns[1:]]
            self.agents.append(Agent(spec, Session(spec.id), at, waits, prefix))
        for agent in self.agents:
            loop.at(agent.arrival_s, lambda a=agent: self._next(a))  # type: ignore[misc]

    def _cached(self, agent: Agent) -> int:
        if agent.next_index == 0:
            return agent.context // self.block_size * self.block_size  # the shared prefix's whole blocks
        if self.tail_blocks:
            return agent.context - 1
        return agent.context // self.block_size * self.block_size

    def _next(self, agent: Agent) -> None:
        spec = agent.spec.turns[agent.next_index]
        turn = SimTurn(
            agent=agent,
            index=agent.next_index,
            prompt_tokens=agent.context + spec.new_tokens,
            cached_tokens=self._cached(agent),
            output_tokens=spec.output_tokens,
            seq=self._seq,
            submitted_s=self.loop.now(),
            rank=self.rank(agent.session),
        )
        self._seq += 1
        agent.turns.append(turn)
        self.submit(turn, agent.session)

    def turn_done(self, turn: SimTurn) -> None:
        """`turn`'s last token is out: commit it to the session and, after the tool wait, send the next."""
        agent = turn.agent
        agent.session.commit([], kv_holder="")  # session_kv=store: no decode engine keeps the KV
        agent.context = turn.prompt_tokens + turn.output_tokens
        agent.next_index += 1
        if agent.next_index < len(agent.spec.turns):
            self.loop.after(agent.tool_waits[agent.next_index - 1], lambda: self._next(agent))
