"""Servicers that raise what a request names, run in the real server skeleton on loopback."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from unittest import mock

import grpc

from agentserve.common import server
from agentserve.common.errors import NotFoundError, RetryableError
from agentserve.common.internal_tls import InternalTLS
from agentserve.common.netutil import free_port
from agentserve.common.telemetry import tracer
from agentserve.v1 import decode_pb2, decode_pb2_grpc, scheduler_pb2, scheduler_pb2_grpc

# What a servicer raises when the request names the kind (tenant, message or first block id).
RAISED: dict[str, Callable[[], Exception]] = {
    "value": lambda: ValueError("max_tokens must be positive"),
    "not_found": lambda: NotFoundError("unknown session s-9"),
    "retryable": lambda: RetryableError("no healthy decode engine"),
    "connection": lambda: ConnectionResetError("engine went away"),
    "bug": lambda: RuntimeError("engine thread died"),
}


def _fail_if_named(kind: str) -> None:
    if kind in RAISED:
        raise RAISED[kind]()


class FailingScheduler(scheduler_pb2_grpc.SchedulerServicer):
    """Unary (OpenSession) and server-streaming (Turn) methods; each opens a span."""

    async def OpenSession(self, request, context):
        with tracer().start_as_current_span("open.work"):
            _fail_if_named(request.tenant)
        return scheduler_pb2.OpenSessionResponse(session_id="s-1")

    async def Turn(self, request, context):
        with tracer().start_as_current_span("turn.work"):
            pass
        yield scheduler_pb2.TurnChunk(text="first")
        while request.message == "endless":  # as fast as it is read: cancelled while sending
            yield scheduler_pb2.TurnChunk(text="more" * 4096)
        _fail_if_named(request.message)
        yield scheduler_pb2.TurnChunk(text="second", finished=True)


class AcceptingRegistry(scheduler_pb2_grpc.SchedulerInternalServicer):
    """Heartbeat: the call engines make every second (not traced)."""

    async def Heartbeat(self, request, context):
        return scheduler_pb2.HeartbeatResponse(known=True)


class FailingDecode(decode_pb2_grpc.DecodeServicer):
    """A client-streaming method (LoadKV)."""

    async def LoadKV(self, request_iterator, context):
        blocks = [block async for block in request_iterator]
        _fail_if_named(blocks[0].block_id.decode())
        return decode_pb2.LoadKVResponse(imported=len(blocks))


class FailingService(server.Service):
    def add_to_server(self, grpc_server: grpc.aio.Server) -> list[str]:
        scheduler_pb2_grpc.add_SchedulerServicer_to_server(FailingScheduler(), grpc_server)
        scheduler_pb2_grpc.add_SchedulerInternalServicer_to_server(AcceptingRegistry(), grpc_server)
        decode_pb2_grpc.add_DecodeServicer_to_server(FailingDecode(), grpc_server)
        return [
            scheduler_pb2.DESCRIPTOR.services_by_name["Scheduler"].full_name,
            scheduler_pb2.DESCRIPTOR.services_by_name["SchedulerInternal"].full_name,
            decode_pb2.DESCRIPTOR.services_by_name["Decode"].full_name,
        ]


@asynccontextmanager
async def serving(tls: InternalTLS | None = None) -> AsyncIterator[str]:
    """`server.serve` running `FailingService` until the block ends (its port on the internal plane:
    mutual TLS with `tls`); yields its address."""
    settings = server.ServerSettings("common-test", "127.0.0.1", free_port(), 0, grace_s=0.5, tls=tls)
    ready = asyncio.Event()
    # The process's tracer provider outlives this server: other tests collect spans after it.
    with mock.patch.object(server, "shutdown_tracing", lambda: None):
        task = asyncio.create_task(server.serve(FailingService(), settings, ready))
        try:
            await asyncio.wait_for(ready.wait(), 10)
            yield f"127.0.0.1:{settings.grpc_port}"
        finally:
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)
