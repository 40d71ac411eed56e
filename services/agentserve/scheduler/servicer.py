"""SchedulerServicer: protobuf in, `SchedulerCore` does the work, protobuf out."""

from __future__ import annotations

from contextlib import aclosing

from agentserve.engine.sampling import SamplingParams
from agentserve.scheduler.core import SchedulerCore
from agentserve.scheduler.events import TurnEvent
from agentserve.scheduler.registry import EngineStatus, NICLoad, Role
from agentserve.scheduler.tool_waits import ToolCall
from agentserve.v1 import common_pb2, scheduler_pb2, scheduler_pb2_grpc

ROLES = {common_pb2.ENGINE_ROLE_PREFILL: Role.PREFILL, common_pb2.ENGINE_ROLE_DECODE: Role.DECODE}


class SchedulerServicer(scheduler_pb2_grpc.SchedulerServicer):
    def __init__(self, core: SchedulerCore) -> None:
        self.core = core

    async def OpenSession(
        self, request: scheduler_pb2.OpenSessionRequest, context
    ) -> scheduler_pb2.OpenSessionResponse:
        session_id = await self.core.open_session(
            request.tenant, request.agent, request.parent_session_id, request.system_prompt
        )
        return scheduler_pb2.OpenSessionResponse(session_id=session_id)

    async def Turn(self, request: scheduler_pb2.TurnRequest, context):
        events = self.core.turn(
            request.session_id,
            message=request.message or None,
            token_ids=list(request.token_ids) or None,
            role=request.role or "user",
            sampling=sampling_from_proto(request.sampling),
        )
        async with aclosing(events):  # a cancelled call releases the session and engines at once
            async for event in events:
                yield turn_chunk(event)

    async def CloseSession(
        self, request: scheduler_pb2.CloseSessionRequest, context
    ) -> scheduler_pb2.CloseSessionResponse:
        turns, tokens = await self.core.close_session(request.session_id)
        return scheduler_pb2.CloseSessionResponse(turns=turns, tokens=tokens)

    async def ListModels(self, request: scheduler_pb2.ListModelsRequest, context) -> scheduler_pb2.ListModelsResponse:
        return scheduler_pb2.ListModelsResponse(models=self.core.model_names)

    async def Register(self, request: common_pb2.EngineStatus, context) -> scheduler_pb2.RegisterResponse:
        interval_ms = self.core.register(engine_status_from_proto(request))
        return scheduler_pb2.RegisterResponse(heartbeat_interval_ms=interval_ms)

    async def Heartbeat(self, request: common_pb2.EngineStatus, context) -> scheduler_pb2.HeartbeatResponse:
        known = self.core.heartbeat(engine_status_from_proto(request))
        return scheduler_pb2.HeartbeatResponse(known=known)

    async def ToolCallStarted(self, request: scheduler_pb2.ToolCallEvent, context) -> scheduler_pb2.ToolCallAck:
        self.core.tool_call_started(tool_call_from_proto(request))
        return scheduler_pb2.ToolCallAck()

    async def ToolCallFinished(self, request: scheduler_pb2.ToolCallEvent, context) -> scheduler_pb2.ToolCallAck:
        self.core.tool_call_finished(tool_call_from_proto(request))
        return scheduler_pb2.ToolCallAck()


def sampling_from_proto(msg: common_pb2.SamplingParams) -> SamplingParams:
    """Validated SamplingParams (ValueError on bad values); top_p 0 means 'unset' = 1.0."""
    return SamplingParams(
        max_tokens=int(msg.max_tokens),
        temperature=float(msg.temperature),
        top_p=float(msg.top_p) if msg.top_p > 0 else 1.0,
        seed=int(msg.seed) if msg.HasField("seed") else None,
        ignore_eos=msg.ignore_eos,
    )


def engine_status_from_proto(msg: common_pb2.EngineStatus) -> EngineStatus:
    if msg.role not in ROLES:
        raise ValueError(f"engine role must be prefill or decode, got {common_pb2.EngineRole.Name(msg.role)}")
    return EngineStatus(
        engine_id=msg.engine_id,
        role=ROLES[msg.role],
        address=msg.address,
        model_fingerprint=msg.model_fingerprint,
        block_size=msg.block_size,
        model_name=msg.model_name,
        running=msg.running,
        waiting=msg.waiting,
        free_kv_blocks=msg.free_kv_blocks,
        total_kv_blocks=msg.total_kv_blocks,
        vocab_size=msg.vocab_size,
        max_context=msg.max_context,
        kv_block_bytes=msg.kv_block_bytes,
        nics=tuple(
            NICLoad(n.name, n.configured_gbps, n.queue_bytes, n.active_transfers, n.bytes_total) for n in msg.nics
        ),
    )


def tool_call_from_proto(msg: scheduler_pb2.ToolCallEvent) -> ToolCall:
    return ToolCall(
        session_id=msg.session_id,
        tool=msg.tool,
        call_id=msg.call_id,
        start_unix_s=msg.start_unix_s,
        predicted_duration_s=msg.predicted_duration_s,
        actual_duration_s=msg.actual_duration_s,
        ok=msg.ok,
    )


def turn_chunk(event: TurnEvent) -> scheduler_pb2.TurnChunk:
    chunk = scheduler_pb2.TurnChunk(
        token_ids=event.token_ids,
        text=event.text,
        finished=event.finished,
        finish_reason=event.finish_reason,
        completion_tokens=event.completion_tokens,
    )
    if event.metadata is not None:
        m = event.metadata
        chunk.metadata.CopyFrom(
            scheduler_pb2.TurnMetadata(
                turn_id=m.turn_id,
                turn_index=m.turn_index,
                prompt_tokens=m.prompt_tokens,
                cached_tokens=m.cached_tokens,
                prefill_engine=m.prefill_engine,
                decode_engine=m.decode_engine,
                trace_id=m.trace_id,
                kv_path=m.kv_path,
                loaded_blocks=m.loaded_blocks,
                relayed_blocks=m.relayed_blocks,
                handoff_blocks=m.handoff_blocks,
                handoff_bytes=m.handoff_bytes,
                handoff_held_blocks=m.handoff_held_blocks,
            )
        )
    return chunk
