"""The scheduler's servicers: protobuf in, `SchedulerCore` does the work, protobuf out.

`SchedulerServicer` is the client API, on the client port. With API keys, its methods
(`CLIENT_METHODS`) run with the key's tenant current (`grpc_auth.ApiKeyInterceptor`): it owns the
sessions they open and is the only one to see them. With several schedulers (a `SessionRouter`),
a session's Turn and CloseSession run on its home scheduler, forwarded there when they arrive
elsewhere (`forwarding.py`). `SchedulerInternalServicer` (engines'
registration and heartbeats, the tool proxy's events) is served only on the internal port.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import aclosing

import grpc

from agentserve.common.api_keys import ApiKeys, resolve_tenant
from agentserve.common.grpc_auth import authenticated_tenant
from agentserve.convert import (
    agent_info_from_proto,
    engine_role_to_proto,
    engine_status_from_proto,
    sampling_from_proto,
    tool_call_from_proto,
    turn_chunk_to_proto,
    turn_segments_from_proto,
)
from agentserve.scheduler.core import SchedulerCore
from agentserve.scheduler.forwarding import SERVED_BY, HomeUnreachable, SessionRouter, forwarded
from agentserve.scheduler.shared_sessions import Located
from agentserve.v1 import common_pb2, scheduler_pb2, scheduler_pb2_grpc

SERVICE = scheduler_pb2.DESCRIPTOR.services_by_name["Scheduler"].full_name
INTERNAL_SERVICE = scheduler_pb2.DESCRIPTOR.services_by_name["SchedulerInternal"].full_name
# What clients call (API keys needed); health and reflection on the client port need none.
CLIENT_METHODS = frozenset(f"/{SERVICE}/{name}" for name in ("OpenSession", "Turn", "CloseSession", "ListModels"))


class SchedulerServicer(scheduler_pb2_grpc.SchedulerServicer):
    def __init__(self, core: SchedulerCore, keys: ApiKeys = ApiKeys(), router: SessionRouter | None = None) -> None:
        self.core = core
        self.keys = keys
        self.router = router

    async def _route(self, session_id: str, context: grpc.aio.ServicerContext) -> Located | None:
        """Where the session's request runs (None: no router, here). When here, the reply's initial
        metadata names this scheduler at once (a forwarder takes its absence for a dead home)."""
        if self.router is None:
            return None
        located = await self.router.route(session_id, _owner(), forwarded=forwarded(context.invocation_metadata()))
        if located.peer is None:
            await context.send_initial_metadata(((SERVED_BY, self.router.scheduler_id),))
        return located

    async def _reroute(self, session_id: str, located: Located, context: grpc.aio.ServicerContext) -> Located:
        assert self.router is not None
        located = await self.router.after_unreachable(session_id, _owner(), located)
        if located.peer is None:
            await context.send_initial_metadata(((SERVED_BY, self.router.scheduler_id),))
        return located

    async def OpenSession(
        self, request: scheduler_pb2.OpenSessionRequest, context: grpc.aio.ServicerContext
    ) -> scheduler_pb2.OpenSessionResponse:
        tenant = resolve_tenant(self.keys, authenticated_tenant(), request.tenant, "OpenSessionRequest.tenant")
        info = agent_info_from_proto(request)
        session_id = await self.core.open_session(
            tenant, request.agent, request.parent_session_id, request.system_prompt, owner=_owner(), info=info
        )
        return scheduler_pb2.OpenSessionResponse(session_id=session_id)

    async def Turn(
        self, request: scheduler_pb2.TurnRequest, context: grpc.aio.ServicerContext
    ) -> AsyncIterator[scheduler_pb2.TurnChunk]:
        located = await self._route(request.session_id, context)
        while located is not None and located.peer is not None:
            assert self.router is not None
            try:
                async for chunk in self.router.forward_turn(located.peer, request, context):
                    yield chunk
                return
            except HomeUnreachable:
                located = await self._reroute(request.session_id, located, context)
        events = self.core.turn(
            request.session_id,
            message=request.message or None,
            token_ids=list(request.token_ids) or None,
            role=request.role or "user",
            sampling=sampling_from_proto(request.sampling),
            owner=_owner(),
            segments=turn_segments_from_proto(request),
        )
        async with aclosing(events):  # a cancelled call releases the session and engines at once
            async for event in events:
                yield turn_chunk_to_proto(event)

    async def CloseSession(
        self, request: scheduler_pb2.CloseSessionRequest, context: grpc.aio.ServicerContext
    ) -> scheduler_pb2.CloseSessionResponse:
        located = await self._route(request.session_id, context)
        while located is not None and located.peer is not None:
            assert self.router is not None
            try:
                return await self.router.forward_close(located.peer, request, context)
            except HomeUnreachable:
                located = await self._reroute(request.session_id, located, context)
        turns, tokens = await self.core.close_session(request.session_id, owner=_owner())
        return scheduler_pb2.CloseSessionResponse(turns=turns, tokens=tokens)

    async def ListModels(
        self, request: scheduler_pb2.ListModelsRequest, context: grpc.aio.ServicerContext
    ) -> scheduler_pb2.ListModelsResponse:
        return scheduler_pb2.ListModelsResponse(models=self.core.model_names)


class SchedulerInternalServicer(scheduler_pb2_grpc.SchedulerInternalServicer):
    def __init__(self, core: SchedulerCore) -> None:
        self.core = core

    async def Register(
        self, request: common_pb2.EngineStatus, context: grpc.aio.ServicerContext
    ) -> scheduler_pb2.RegisterResponse:
        interval_ms = self.core.register(engine_status_from_proto(request))
        return scheduler_pb2.RegisterResponse(heartbeat_interval_ms=interval_ms, peers=self.core.peers())

    async def Heartbeat(
        self, request: common_pb2.EngineStatus, context: grpc.aio.ServicerContext
    ) -> scheduler_pb2.HeartbeatResponse:
        status = engine_status_from_proto(request)
        known = self.core.heartbeat(status)
        return scheduler_pb2.HeartbeatResponse(
            known=known, peers=self.core.peers(), drain=self.core.drain_requested(status.engine_id)
        )

    async def Deregister(
        self, request: common_pb2.EngineStatus, context: grpc.aio.ServicerContext
    ) -> scheduler_pb2.DeregisterResponse:
        return scheduler_pb2.DeregisterResponse(deregistered=self.core.deregister(engine_status_from_proto(request)))

    async def DrainEngine(
        self, request: scheduler_pb2.DrainEngineRequest, context: grpc.aio.ServicerContext
    ) -> scheduler_pb2.DrainEngineResponse:
        engine = self.core.drain_engine(request.engine)
        return scheduler_pb2.DrainEngineResponse(
            engine_id=engine.engine_id, role=engine_role_to_proto(engine.status.role), busy=engine.busy
        )

    async def ToolCallStarted(
        self, request: scheduler_pb2.ToolCallEvent, context: grpc.aio.ServicerContext
    ) -> scheduler_pb2.ToolCallAck:
        self.core.tool_call_started(tool_call_from_proto(request))
        return scheduler_pb2.ToolCallAck()

    async def ToolCallFinished(
        self, request: scheduler_pb2.ToolCallEvent, context: grpc.aio.ServicerContext
    ) -> scheduler_pb2.ToolCallAck:
        self.core.tool_call_finished(tool_call_from_proto(request))
        return scheduler_pb2.ToolCallAck()


def _owner() -> str:
    """Whose sessions this call sees: the API key's tenant, or "" without keys."""
    return authenticated_tenant() or ""
