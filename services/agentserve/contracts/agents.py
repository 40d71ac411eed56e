"""What an agent application tells the server about a session: which agent it is, where it sits
in the job's DAG and how much it matters. The scheduler's KV lifecycle and admission read it; a
session opened without it is an ordinary agent of default priority."""

from __future__ import annotations

from dataclasses import dataclass

MAX_AGENT_ID_LENGTH = 128
MAX_PARENTS = 64  # an all-gather over more agents than this is a job to split, not one node
PRIORITY_RANGE = (-100, 100)  # higher is served first; 0 is the default
# The scheduling priority engines see (a request's `priority`, scheduler/agent_priority.py) is at
# least this for a critical-path agent and below it for every other: the engines' critical KV
# share and the queues' order both read it.
CRITICAL_PRIORITY = 1000


@dataclass(frozen=True)
class AgentInfo:
    agent: str = ""  # the agent's id within its job (a node of the DAG)
    parents: tuple[str, ...] = ()  # agent ids whose results this agent waits for (DAG edges)
    critical: bool = False  # on the job's critical path: delaying it delays the whole job
    priority: int = 0

    def __post_init__(self) -> None:
        for name, value in (("agent", self.agent), *(("parents", p) for p in self.parents)):
            if len(value) > MAX_AGENT_ID_LENGTH or not value.isprintable():
                raise ValueError(f"{name}: an agent id must be printable and at most {MAX_AGENT_ID_LENGTH} characters")
        if any(not p for p in self.parents):
            raise ValueError("parents: agent ids must not be empty")
        if len(self.parents) > MAX_PARENTS:
            raise ValueError(f"parents: at most {MAX_PARENTS} agents, got {len(self.parents)}")
        if self.agent and self.agent in self.parents:
            raise ValueError(f"parents: agent {self.agent!r} cannot be its own parent")
        low, high = PRIORITY_RANGE
        if isinstance(self.priority, bool) or not isinstance(self.priority, int) or not low <= self.priority <= high:
            raise ValueError(f"priority must be an integer in [{low}, {high}], got {self.priority!r}")
