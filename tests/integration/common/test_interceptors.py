"""The server skeleton's interceptors over loopback: what a servicer raises becomes the same status
for unary, server-streaming and client-streaming methods, and the caller's trace reaches the spans a
servicer opens, through the client interceptors of `open_channel`."""

from __future__ import annotations

import asyncio
import gc
import logging

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc
from opentelemetry import trace
from opentelemetry.trace import SpanKind

from agentserve.common.channels import open_channel
from agentserve.common.telemetry import outgoing_metadata, tracer
from agentserve.v1 import common_pb2, decode_pb2_grpc, scheduler_pb2, scheduler_pb2_grpc
from tests.integration.common.fakes import RAISED, serving

pytestmark = pytest.mark.integration

OPEN = "/agentserve.v1.Scheduler/OpenSession"
TURN = "/agentserve.v1.Scheduler/Turn"
StatusCode = grpc.StatusCode

EXPECTED = {
    "value": (StatusCode.INVALID_ARGUMENT, "max_tokens must be positive"),
    "not_found": (StatusCode.NOT_FOUND, "unknown session s-9"),
    "retryable": (StatusCode.UNAVAILABLE, "no healthy decode engine"),
    "connection": (StatusCode.UNAVAILABLE, "engine went away"),
    "bug": (StatusCode.INTERNAL, "engine thread died"),
}


async def _status(call) -> tuple[StatusCode, str]:
    try:
        await call
    except grpc.aio.AioRpcError as exc:
        return exc.code(), exc.details()
    return StatusCode.OK, ""


async def _turn(stub, message: str) -> tuple[list[str], tuple[StatusCode, str]]:
    texts = []
    try:
        async for chunk in stub.Turn(scheduler_pb2.TurnRequest(message=message)):
            texts.append(chunk.text)
    except grpc.aio.AioRpcError as exc:
        return texts, (exc.code(), exc.details())
    return texts, (StatusCode.OK, "")


def test_every_kind_of_method_maps_exceptions_to_statuses(caplog) -> None:
    async def main():
        async with serving() as address, open_channel(address) as channel:
            scheduler, decode = scheduler_pb2_grpc.SchedulerStub(channel), decode_pb2_grpc.DecodeStub(channel)
            out = {}
            for kind in [*RAISED, "ok"]:
                blocks = iter([common_pb2.KVBlock(block_id=kind.encode()), common_pb2.KVBlock(block_id=b"2")])
                out[kind] = (
                    await _status(scheduler.OpenSession(scheduler_pb2.OpenSessionRequest(tenant=kind))),
                    await _turn(scheduler, kind),
                    await _status(decode.LoadKV(blocks)),
                )
            return out

    with caplog.at_level(logging.ERROR, "agentserve.common.errors"):
        outcomes = asyncio.run(main())
    ok = (StatusCode.OK, "")
    expected = {kind: (status, (["first"], status), status) for kind, status in EXPECTED.items()}
    assert outcomes == {**expected, "ok": (ok, (["first", "second"], ok), ok)}
    # Only the bug is logged, with its traceback, once per method.
    logged = [(r.getMessage(), type(r.exc_info[1])) for r in caplog.records if r.name == "agentserve.common.errors"]
    assert logged == [
        (f"{OPEN} failed", RuntimeError),
        (f"{TURN} failed", RuntimeError),
        ("/agentserve.v1.Decode/LoadKV failed", RuntimeError),
    ]


def test_health_watch_and_check_work_behind_the_interceptors() -> None:
    async def main():
        async with serving() as address, open_channel(address) as channel:
            stub = health_pb2_grpc.HealthStub(channel)
            watch = stub.Watch(health_pb2.HealthCheckRequest(service=""))
            first = await asyncio.wait_for(watch.read(), 5)
            watch.cancel()
            check = await stub.Check(health_pb2.HealthCheckRequest(service="agentserve.v1.Scheduler"))
            return first.status, check.status

    serving_ = health_pb2.HealthCheckResponse.SERVING
    assert asyncio.run(main()) == (serving_, serving_)


def _tree(spans, root: str) -> set[tuple[str, SpanKind, str]]:
    """(name, kind, parent's name) of every finished span in the trace of the span named `root`."""
    finished = spans.get_finished_spans()
    roots = [s for s in finished if s.name == root]
    if not roots:
        return set()
    in_trace = [s for s in finished if s.context.trace_id == roots[0].context.trace_id]
    names = {s.context.span_id: s.name for s in in_trace}
    return {(s.name, s.kind, names.get(s.parent.span_id, "?") if s.parent else "") for s in in_trace}


async def _trees(spans, roots: tuple[str, ...], size: int, timeout_s: float = 5.0) -> list[set]:
    """The traces of `roots` once each has `size` spans (the server ends its span after the client
    has the reply), or as they are at the timeout."""
    deadline = asyncio.get_running_loop().time() + timeout_s
    while True:
        trees = [_tree(spans, root) for root in roots]
        if all(len(t) >= size for t in trees) or asyncio.get_running_loop().time() > deadline:
            return trees
        await asyncio.sleep(0.01)


def test_trace_context_flows_from_client_to_the_servicers_spans(spans) -> None:
    async def main():
        async with serving() as address, open_channel(address) as channel:
            stub = scheduler_pb2_grpc.SchedulerStub(channel)
            with tracer().start_as_current_span("caller"):
                await stub.OpenSession(scheduler_pb2.OpenSessionRequest(tenant="ok"))
            # A span that is not current at the call (a generator's, say) parents it through metadata.
            turn = tracer().start_span("turn")
            with trace.use_span(turn, end_on_exit=False):
                metadata = outgoing_metadata()
            async for _ in stub.Turn(scheduler_pb2.TurnRequest(message="ok"), metadata=metadata):
                pass
            turn.end()
            await scheduler_pb2_grpc.SchedulerInternalStub(channel).Heartbeat(common_pb2.EngineStatus(engine_id="d0"))
            return await _trees(spans, ("caller", "turn"), 4)

    opened, turned = asyncio.run(main())
    internal, client, server = SpanKind.INTERNAL, SpanKind.CLIENT, SpanKind.SERVER
    assert opened == {
        ("caller", internal, ""),
        (OPEN, client, "caller"),
        (OPEN, server, OPEN),
        ("open.work", internal, OPEN),
    }
    assert turned == {
        ("turn", internal, ""),
        (TURN, client, "turn"),
        (TURN, server, TURN),
        ("turn.work", internal, TURN),
    }
    # Engines heartbeat every second: those calls are not traced.
    assert not [s.name for s in spans.get_finished_spans() if s.name.endswith("/Heartbeat")]


def test_streams_cancelled_mid_send_leave_no_trace_context_behind(caplog) -> None:
    async def main():
        async with serving() as address:
            for _ in range(5):
                async with open_channel(address) as channel:
                    call = scheduler_pb2_grpc.SchedulerStub(channel).Turn(scheduler_pb2.TurnRequest(message="endless"))
                    for _ in range(3):
                        await call.read()
                    call.cancel()
            # and one still streaming when the server stops
            channel = open_channel(address)
            call = scheduler_pb2_grpc.SchedulerStub(channel).Turn(scheduler_pb2.TurnRequest(message="endless"))
            await call.read()
        await channel.close()
        gc.collect()  # what grpc.aio left unclosed is closed now, in other contexts
        await asyncio.sleep(0.1)

    with caplog.at_level(logging.ERROR):
        asyncio.run(main())
    assert [r.getMessage() for r in caplog.records if r.levelno >= logging.ERROR] == []
