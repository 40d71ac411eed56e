"""Agent priority: the DAG's dependant depth and critical path, the caller's priority and a tool
return, composed exactly; and the priority every engine request of a turn carries."""

from __future__ import annotations

import pytest

from agentserve.contracts import AgentInfo, SamplingParams, ToolCall
from agentserve.contracts.agents import CRITICAL_PRIORITY
from agentserve.scheduler.agent_priority import DEPTH_STEP, RETURN_STEP, AgentDAG, priority_of
from agentserve.scheduler.sessions import Session
from tests.unit.scheduler.fakes import collect, run

pytestmark = pytest.mark.unit


def session(agent: str, *parents: str, owner: str = "o", priority: int = 0, critical: bool = False) -> Session:
    return Session(agent, tenant="t", owner=owner, info=AgentInfo(agent, parents, critical, priority))


def test_a_fan_out_feeding_an_all_gather_puts_every_branch_on_the_critical_path():
    dag = AgentDAG()
    planner = session("planner")
    workers = [session(f"w{i}", "planner") for i in range(3)]
    gather = session("gather", "w0", "w1", "w2")
    for s in (planner, *workers, gather):
        dag.add(s)
    assert [dag.depth("o", "t", a) for a in ("planner", "w0", "gather")] == [2, 1, 0]
    assert dag.on_critical_path("o", "t", "planner") and not dag.on_critical_path("o", "t", "w0")
    # The planner is done and closes: now every branch is as deep as any, so all are critical.
    dag.remove(planner)
    assert [dag.on_critical_path("o", "t", w.info.agent) for w in workers] == [True, True, True]
    assert not dag.on_critical_path("o", "t", "gather")  # nothing waits on it
    assert priority_of(workers[0], dag) == CRITICAL_PRIORITY + DEPTH_STEP
    assert priority_of(gather, dag) == 0
    # Another owner's job of the same agent ids is another DAG.
    assert dag.depth("other", "t", "w0") == 0


def test_caller_priority_depth_and_a_tool_return_add_up():
    dag = AgentDAG()
    a, b = session("a", priority=-30), session("b", "a", priority=7)
    for s in (a, b):
        dag.add(s)
    assert priority_of(b, dag) == 7
    assert priority_of(a, dag) == CRITICAL_PRIORITY - 30 + DEPTH_STEP  # b waits on it: the deepest
    b.tools.started(ToolCall("b", "search", "c1", 0.0, 1.0))
    b.tools.ended(ToolCall("b", "search", "c1", 0.0, 1.0, 1.0, True))
    assert priority_of(b, dag) == 7 + RETURN_STEP
    flagged = session("x", critical=True, priority=-100)
    assert priority_of(flagged, dag) == CRITICAL_PRIORITY - 100  # the caller's flag alone


def test_a_cycle_and_unnamed_agents_do_not_break_it():
    dag = AgentDAG()
    x, y = session("x", "y"), session("y", "x")
    anonymous = Session("s", info=AgentInfo())
    for s in (x, y, anonymous):
        dag.add(s)
    assert dag.depth("o", "t", "x") == 1 and priority_of(anonymous, dag) == 0
    dag.remove(anonymous)
    dag.remove(x)
    dag.remove(y)
    assert dag.depth("o", "t", "x") == 0


def test_every_engine_request_of_a_turn_carries_the_sessions_priority(make_core, engines):
    core = make_core()
    sampling = SamplingParams(max_tokens=3)

    async def go():
        parent = await core.open_session(info=AgentInfo("lead", priority=5))
        child = await core.open_session(info=AgentInfo("helper", ("lead",), priority=2))
        await collect(core.turn(child, token_ids=[5, 6, 7], sampling=sampling))
        core.tool_call_started(ToolCall(parent, "search", "c1", 0.0, 1.0))
        core.tool_call_finished(ToolCall(parent, "search", "c1", 0.0, 1.0, 1.0, True))
        await collect(core.turn(parent, token_ids=[8, 9], sampling=sampling))  # a return
        await collect(core.turn(parent, token_ids=[10], sampling=sampling))  # no longer one

    run(go())
    lead = CRITICAL_PRIORITY + 5 + DEPTH_STEP  # the helper waits on it
    expected = [2, lead + RETURN_STEP, lead]
    assert [request.priority for _, request, _ in engines.prefills] == expected
    assert [request.priority for _, request, _ in engines.generates] == expected
