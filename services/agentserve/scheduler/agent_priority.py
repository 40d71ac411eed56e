"""Agent priority: the one number engines order their queues by, from what the scheduler knows.

    priority = caller's priority (-100..100)
             + DEPTH_STEP x the agents waiting on this one, transitively (the DAG below it, capped)
             + RETURN_STEP when this turn is a return from a tool (its KV was kept or uploaded for
               it: serve it before that KV is evicted)
             + CRITICAL_PRIORITY when the agent is on its job's critical path

An agent is on the critical path when the caller says so (`critical`), or when, among its job's
open agents (one owner and tenant), none has a longer chain of agents waiting on it (and at least
one waits on it): in a fan-out feeding an all-gather every branch is, since the gather waits for
the slowest. So a critical agent's priority is >= CRITICAL_PRIORITY and every other one's is
below it, which is what the engines' critical KV share tests.
"""

from __future__ import annotations

from collections import defaultdict

from agentserve.contracts.agents import CRITICAL_PRIORITY
from agentserve.scheduler.sessions import Session

DEPTH_STEP = 10
MAX_DEPTH = 5  # a longer chain adds no more: the caller's priority keeps its say
RETURN_STEP = 20


class AgentDAG:
    """The open agents of each job and which ones wait on which (their `parents`)."""

    def __init__(self) -> None:
        # job -> agent id -> its parents, for every open session that names an agent
        self._parents: dict[tuple[str, str], dict[str, tuple[str, ...]]] = defaultdict(dict)
        self._count: dict[tuple[str, str, str], int] = defaultdict(int)  # sessions per (job, agent)

    def add(self, session: Session) -> None:
        if not session.info.agent:
            return
        job = (session.owner, session.tenant)
        self._parents[job][session.info.agent] = session.info.parents
        self._count[(*job, session.info.agent)] += 1

    def remove(self, session: Session) -> None:
        if not session.info.agent:
            return
        job, key = (session.owner, session.tenant), (session.owner, session.tenant, session.info.agent)
        self._count[key] -= 1
        if self._count[key] > 0:
            return
        del self._count[key]
        self._parents[job].pop(session.info.agent, None)
        if not self._parents[job]:
            del self._parents[job]

    def depth(self, owner: str, tenant: str, agent: str) -> int:
        """The longest chain of open agents waiting on `agent` (0: none waits on it)."""
        return self._depths(owner, tenant).get(agent, 0)

    def on_critical_path(self, owner: str, tenant: str, agent: str) -> bool:
        depths = self._depths(owner, tenant)
        deepest = max(depths.values(), default=0)
        return deepest > 0 and depths.get(agent, 0) == deepest

    def _depths(self, owner: str, tenant: str) -> dict[str, int]:
        parents = self._parents.get((owner, tenant), {})
        children: dict[str, list[str]] = defaultdict(list)
        for agent, ups in parents.items():
            for up in ups:
                if up in parents:  # a closed parent is done: nothing waits on it any more
                    children[up].append(agent)
        depths: dict[str, int] = {}

        def depth(agent: str, path: frozenset[str]) -> int:
            if agent in depths:
                return depths[agent]
            # A cycle (a caller's mistake) counts each agent once along the path.
            below = [depth(child, path | {child}) + 1 for child in children.get(agent, ()) if child not in path]
            depths[agent] = max(below, default=0)
            return depths[agent]

        for agent in parents:
            depth(agent, frozenset({agent}))
        return depths


def priority_of(session: Session, dag: AgentDAG) -> int:
    """The scheduling priority of `session`'s next request (see the module docstring)."""
    info = session.info
    depth = dag.depth(session.owner, session.tenant, info.agent) if info.agent else 0
    priority = info.priority + DEPTH_STEP * min(depth, MAX_DEPTH)
    if session.tools.returned:
        priority += RETURN_STEP
    critical = info.critical or (bool(info.agent) and dag.on_critical_path(session.owner, session.tenant, info.agent))
    return priority + (CRITICAL_PRIORITY if critical else 0)
