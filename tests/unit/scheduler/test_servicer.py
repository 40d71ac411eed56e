"""SchedulerServicer: protobuf <-> SchedulerCore, errors as gRPC statuses (behind the server's error
interceptor; no server needed)."""

from __future__ import annotations

from types import SimpleNamespace

import grpc
import pytest

from agentserve.common.interceptors import mapped
from agentserve.contracts import AgentInfo
from agentserve.scheduler.servicer import SchedulerInternalServicer, SchedulerServicer
from agentserve.v1 import common_pb2, scheduler_pb2, scheduler_pb2_grpc
from tests.unit.scheduler.fakes import EOS, FakeContext, engine_proto, run

pytestmark = pytest.mark.unit


def served(core) -> SimpleNamespace:
    """Both servicers' methods (clients' and the internal plane's) as the server runs them: behind
    the error interceptor."""
    methods = {}
    for servicer, base in (
        (SchedulerServicer(core), scheduler_pb2_grpc.SchedulerServicer),
        (SchedulerInternalServicer(core), scheduler_pb2_grpc.SchedulerInternalServicer),
    ):
        names = [n for n in vars(base) if not n.startswith("_")]
        methods.update({n: mapped(getattr(servicer, n), n) for n in names})
    return SimpleNamespace(**methods)


async def stream(method, request, context) -> list:
    return [chunk async for chunk in method(request, context)]


def test_session_and_turn_round_trip(make_core, tokenizer) -> None:
    servicer = served(make_core())

    async def go():
        opened = await servicer.OpenSession(scheduler_pb2.OpenSessionRequest(tenant="acme"), FakeContext())
        request = scheduler_pb2.TurnRequest(
            session_id=opened.session_id, message="hi", sampling=common_pb2.SamplingParams(max_tokens=8)
        )
        chunks = await stream(servicer.Turn, request, FakeContext())
        closed = await servicer.CloseSession(
            scheduler_pb2.CloseSessionRequest(session_id=opened.session_id), FakeContext()
        )
        return chunks, closed

    chunks, closed = run(go())
    assert [list(c.token_ids) for c in chunks] == [[300], [301], [302], [EOS]]
    assert chunks[0].HasField("metadata") and chunks[0].metadata.decode_engine == "d0"
    assert not any(c.HasField("metadata") for c in chunks[1:])
    assert chunks[-1].finished and chunks[-1].finish_reason == "stop" and chunks[-1].completion_tokens == 4
    assert "".join(c.text for c in chunks) == tokenizer.decode([300, 301, 302, EOS])
    assert closed.turns == 1 and closed.tokens > 4


@pytest.mark.parametrize(
    "request_fields, message",
    [
        (dict(message="hi", sampling=common_pb2.SamplingParams()), "max_tokens must be positive"),
        (dict(sampling=common_pb2.SamplingParams(max_tokens=4)), "message is empty"),
        (dict(session_id="nope", message="hi", sampling=common_pb2.SamplingParams(max_tokens=4)), "unknown session"),
    ],
)
def test_turn_errors_are_invalid_argument_or_not_found(make_core, request_fields, message) -> None:
    core = make_core()
    servicer = served(core)
    context = FakeContext()

    async def go():
        sid = await core.open_session()
        fields = {"session_id": sid, **request_fields}
        with pytest.raises(grpc.aio.AbortError):
            await stream(servicer.Turn, scheduler_pb2.TurnRequest(**fields), context)

    run(go())
    expected = grpc.StatusCode.NOT_FOUND if message == "unknown session" else grpc.StatusCode.INVALID_ARGUMENT
    assert context.code is expected and message in context.details


def test_no_engine_is_unavailable(make_core) -> None:
    core = make_core(prefill=0, decode=0)
    servicer, context = served(core), FakeContext()

    async def go():
        sid = await core.open_session()
        request = scheduler_pb2.TurnRequest(
            session_id=sid, token_ids=[5], sampling=common_pb2.SamplingParams(max_tokens=4)
        )
        with pytest.raises(grpc.aio.AbortError):
            await stream(servicer.Turn, request, context)

    run(go())
    assert context.code is grpc.StatusCode.UNAVAILABLE


def test_register_heartbeat_and_models(make_core) -> None:
    core = make_core()
    servicer = served(core)

    async def go():
        unknown = await servicer.Heartbeat(engine_proto(), FakeContext())
        registered = await servicer.Register(engine_proto(), FakeContext())
        known = await servicer.Heartbeat(engine_proto(running=5), FakeContext())
        context = FakeContext()
        with pytest.raises(grpc.aio.AbortError):
            await servicer.Register(engine_proto("d10", model_fingerprint="other"), context)
        models = await servicer.ListModels(scheduler_pb2.ListModelsRequest(), FakeContext())
        return unknown, registered, known, context, models

    unknown, registered, known, context, models = run(go())
    assert unknown.known is False and known.known is True
    assert registered.heartbeat_interval_ms == 1000
    assert core.registry.get("d9").status.running == 5
    assert context.code is grpc.StatusCode.INVALID_ARGUMENT and "serves model other" in context.details
    assert list(models.models) == ["agentserve-tiny"]


def test_register_and_heartbeat_replies_carry_the_registered_decode_engines(make_core) -> None:
    """The engines' dial allow-list: decode engines only (a prefill engine is never a handoff or relay
    target), and each reply has the set as it is now."""
    core = make_core()
    servicer = served(core)
    before = set(core.peers())

    async def go():
        first = await servicer.Register(engine_proto("d9", address="10.0.0.9:50055"), FakeContext())
        prefill = common_pb2.ENGINE_ROLE_PREFILL
        await servicer.Register(engine_proto("p9", role=prefill, address="10.0.0.8:50054"), FakeContext())
        await servicer.Register(engine_proto("d10", address="10.0.0.10:50055"), FakeContext())
        beat = await servicer.Heartbeat(engine_proto("d9", address="10.0.0.9:50055"), FakeContext())
        return first, beat

    first, beat = run(go())
    assert set(first.peers) == before | {"10.0.0.9:50055"}
    assert set(beat.peers) == before | {"10.0.0.9:50055", "10.0.0.10:50055"}
    assert "10.0.0.8:50054" not in beat.peers


def test_tool_call_events_update_the_session(make_core) -> None:
    core = make_core()
    servicer = served(core)

    async def go():
        sid = await core.open_session()
        event = scheduler_pb2.ToolCallEvent(session_id=sid, tool="search", call_id="c1", predicted_duration_s=2.0)
        await servicer.ToolCallStarted(event, FakeContext())
        waiting = core.sessions.get(sid).waiting_tool
        event.actual_duration_s, event.ok = 1.5, True
        await servicer.ToolCallFinished(event, FakeContext())
        context = FakeContext()
        with pytest.raises(grpc.aio.AbortError):
            await servicer.ToolCallStarted(scheduler_pb2.ToolCallEvent(session_id="nope", call_id="c"), context)
        return core.sessions.get(sid), waiting, context

    session, waiting, context = run(go())
    assert waiting is True and session.waiting_tool is False
    assert session.tools.total_wait_s == 1.5 and [c.tool for c in session.tools.finished] == ["search"]
    assert context.code is grpc.StatusCode.NOT_FOUND


def test_open_session_carries_the_agent_info(make_core) -> None:
    core = make_core()
    servicer = served(core)
    request = scheduler_pb2.OpenSessionRequest(agent="writer", parents=["planner"], critical=True, priority=9)
    opened = run(servicer.OpenSession(request, FakeContext()))
    session = core.sessions.get(opened.session_id)
    assert (session.agent, session.info) == ("writer", AgentInfo("writer", ("planner",), True, 9))


def test_open_session_with_a_bad_priority_is_invalid_argument_naming_it(make_core) -> None:
    servicer = served(make_core())
    context = FakeContext()
    with pytest.raises(grpc.aio.AbortError):
        run(servicer.OpenSession(scheduler_pb2.OpenSessionRequest(priority=-101), context))
    assert context.code is grpc.StatusCode.INVALID_ARGUMENT
    assert context.details.startswith("OpenSessionRequest.priority must be an integer in [-100, 100]")


def test_a_turn_with_bad_segments_is_invalid_argument_naming_the_field(make_core) -> None:
    core = make_core()
    servicer, context = served(core), FakeContext()

    async def go():
        sid = await core.open_session()
        request = scheduler_pb2.TurnRequest(
            session_id=sid,
            token_ids=[1, 2, 3],
            sampling=common_pb2.SamplingParams(max_tokens=4),
            segments=scheduler_pb2.TurnSegments(shared=[scheduler_pb2.SharedBlockRef(content_id="a", text="x")]),
        )
        request.segments.shared[0].token_ids.append(1)
        with pytest.raises(grpc.aio.AbortError):
            await stream(servicer.Turn, request, context)

    run(go())
    assert context.code is grpc.StatusCode.INVALID_ARGUMENT
    assert context.details == "segments.shared[0] ('a') needs exactly one of token_ids and text"


@pytest.mark.parametrize(
    "engine, code, message",
    [
        ("", grpc.StatusCode.INVALID_ARGUMENT, "DrainEngineRequest.engine must name an engine"),
        ("d7", grpc.StatusCode.NOT_FOUND, "DrainEngineRequest.engine: no registered engine 'd7'"),
        ("p0", grpc.StatusCode.FAILED_PRECONDITION, "p0 is the last prefill engine"),
    ],
)
def test_drain_engine_refuses_bad_names_and_the_last_engine_by_name(make_core, engine, code, message) -> None:
    servicer, context = served(make_core()), FakeContext()
    with pytest.raises(grpc.aio.AbortError):
        run(servicer.DrainEngine(scheduler_pb2.DrainEngineRequest(engine=engine), context))
    assert context.code is code and message in context.details


def test_drain_engine_then_heartbeat_says_drain_and_deregister_removes_it(make_core) -> None:
    core = make_core()
    servicer = served(core)

    async def go():
        drained = await servicer.DrainEngine(scheduler_pb2.DrainEngineRequest(engine="127.0.0.1:7000"), FakeContext())
        beat = await servicer.Heartbeat(engine_proto("d0", address="127.0.0.1:7000"), FakeContext())
        other = await servicer.Heartbeat(engine_proto("d1", address="127.0.0.1:7001"), FakeContext())
        left = await servicer.Deregister(engine_proto("d0", address="127.0.0.1:7000"), FakeContext())
        return drained, beat, other, left

    drained, beat, other, left = run(go())
    assert (drained.engine_id, drained.role, drained.busy) == ("d0", common_pb2.ENGINE_ROLE_DECODE, 0)
    assert beat.drain and not other.drain
    assert left.deregistered and core.registry.get("d0") is None
