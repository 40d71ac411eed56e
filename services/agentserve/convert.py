"""The one place protobuf meets the contract types (`agentserve.contracts`).

Servicers call `*_from_proto` on what arrives and `*_to_proto` on what they send back; clients do
the reverse. Everything else speaks the domain types. Conversions from protobuf validate: a bad
value raises ValueError (the servicers' INVALID_ARGUMENT), never reaches the logic.
"""

from __future__ import annotations

from collections.abc import Sequence

from agentserve.contracts import (
    AgentInfo,
    EngineStatus,
    GenerateChunk,
    GenerateRequest,
    KVHint,
    KVPath,
    LoadPlan,
    NICStatus,
    PrefillRequest,
    PrefillResult,
    Role,
    SamplingParams,
    StructuredKind,
    StructuredOutput,
    TokenLogprob,
    ToolCall,
    ToolSchema,
    TurnEvent,
)
from agentserve.contracts.context import ContextLayout, Piece
from agentserve.contracts.segments import (
    PrivateSegment,
    ReuseMode,
    ReusePolicy,
    Segment,
    SegmentedPrompt,
    SharedBlock,
)
from agentserve.contracts.structured import NO_PARAMETERS
from agentserve.contracts.turn_segments import SharedRef, TurnSegments
from agentserve.v1 import common_pb2, decode_pb2, fabric_pb2, prefill_pb2, scheduler_pb2

_ROLE_TO_PROTO = {Role.PREFILL: common_pb2.ENGINE_ROLE_PREFILL, Role.DECODE: common_pb2.ENGINE_ROLE_DECODE}
_ROLE_FROM_PROTO = {v: k for k, v in _ROLE_TO_PROTO.items()}
_PATH_TO_PROTO: dict[KVPath, prefill_pb2.KVPath] = {
    KVPath.A: prefill_pb2.KV_PATH_A,
    KVPath.B: prefill_pb2.KV_PATH_B,
    KVPath.SPLIT: prefill_pb2.KV_PATH_SPLIT,
}
_KIND_TO_PROTO = {
    StructuredKind.JSON_OBJECT: common_pb2.StructuredOutput.KIND_JSON_OBJECT,
    StructuredKind.JSON_SCHEMA: common_pb2.StructuredOutput.KIND_JSON_SCHEMA,
    StructuredKind.TOOL_CALL: common_pb2.StructuredOutput.KIND_TOOL_CALL,
    StructuredKind.TEXT_OR_TOOL_CALLS: common_pb2.StructuredOutput.KIND_TEXT_OR_TOOL_CALLS,
}
_KIND_FROM_PROTO = {v: k for k, v in _KIND_TO_PROTO.items()}
_PATH_FROM_PROTO: dict[int, KVPath] = {
    prefill_pb2.KV_PATH_UNSPECIFIED: KVPath.A,
    **{v: k for k, v in _PATH_TO_PROTO.items()},
}


# --- sampling ---------------------------------------------------------------------------------


def sampling_to_proto(params: SamplingParams, max_tokens: int | None = None) -> common_pb2.SamplingParams:
    """The wire sampling message; `max_tokens` overrides the budget (decode gets what is left).
    Stop token ids and stop strings are not sent: the scheduler applies them to the stream itself."""
    return common_pb2.SamplingParams(
        max_tokens=params.max_tokens if max_tokens is None else max_tokens,
        temperature=params.temperature,
        top_p=params.top_p,
        seed=params.seed,
        ignore_eos=params.ignore_eos,
        min_tokens=params.min_tokens,
        logprobs=params.logprobs,
        structured=None if params.structured is None else structured_to_proto(params.structured),
    )


def sampling_from_proto(msg: common_pb2.SamplingParams) -> SamplingParams:
    """Validated SamplingParams (ValueError on bad values); top_p 0 means 'unset' = 1.0."""
    return SamplingParams(
        max_tokens=int(msg.max_tokens),
        temperature=float(msg.temperature),
        top_p=float(msg.top_p) if msg.top_p > 0 else 1.0,
        seed=int(msg.seed) if msg.HasField("seed") else None,
        ignore_eos=msg.ignore_eos,
        min_tokens=int(msg.min_tokens),
        logprobs=int(msg.logprobs) if msg.HasField("logprobs") else None,
        structured=structured_from_proto(msg.structured) if msg.HasField("structured") else None,
    )


def structured_to_proto(structured: StructuredOutput) -> common_pb2.StructuredOutput:
    return common_pb2.StructuredOutput(
        kind=_KIND_TO_PROTO[structured.kind],
        schema=structured.schema,
        tools=[common_pb2.ToolSchema(name=t.name, parameters=t.parameters) for t in structured.tools],
        single_call=structured.single_call,
    )


def structured_from_proto(msg: common_pb2.StructuredOutput) -> StructuredOutput:
    """ValueError for an unknown kind or a malformed schema (the grammar's compilation is the engine's check)."""
    kind = _KIND_FROM_PROTO.get(msg.kind)
    if kind is None:
        raise ValueError(f"structured.kind must be set to a known kind, got {msg.kind}")
    return StructuredOutput(
        kind,
        schema=msg.schema,
        tools=tuple(ToolSchema(t.name, t.parameters or NO_PARAMETERS) for t in msg.tools),
        single_call=msg.single_call,
    )


def logprob_to_proto(entry: TokenLogprob) -> common_pb2.TokenLogprob:
    return common_pb2.TokenLogprob(
        token_id=entry.token_id,
        logprob=entry.logprob,
        top_token_ids=[t for t, _ in entry.top],
        top_logprobs=[lp for _, lp in entry.top],
    )


def logprob_from_proto(msg: common_pb2.TokenLogprob) -> TokenLogprob:
    return TokenLogprob(msg.token_id, msg.logprob, tuple(zip(msg.top_token_ids, msg.top_logprobs)))


# --- KV paths ---------------------------------------------------------------------------------


def kv_path_to_proto(path: KVPath) -> prefill_pb2.KVPath:
    return _PATH_TO_PROTO[path]


def kv_path_from_proto(value: int) -> KVPath:
    """UNSPECIFIED reads as A; ValueError for a value this build does not know."""
    try:
        return _PATH_FROM_PROTO[value]
    except KeyError:
        raise ValueError(f"unknown kv_path {value}") from None


# --- engine status ----------------------------------------------------------------------------


def engine_role_to_proto(role: Role) -> common_pb2.EngineRole:
    return _ROLE_TO_PROTO[role]


def engine_status_to_proto(status: EngineStatus) -> common_pb2.EngineStatus:
    return common_pb2.EngineStatus(
        engine_id=status.engine_id,
        role=engine_role_to_proto(status.role),
        address=status.address,
        model_name=status.model_name,
        model_fingerprint=status.model_fingerprint,
        block_size=status.block_size,
        running=status.running,
        waiting=status.waiting,
        free_kv_blocks=status.free_kv_blocks,
        total_kv_blocks=status.total_kv_blocks,
        vocab_size=status.vocab_size,
        max_context=status.max_context,
        nics=[nic_status_to_proto(n) for n in status.nics],
        kv_block_bytes=status.kv_block_bytes,
        unfinished_prefill_tokens=status.unfinished_prefill_tokens,
        draining=status.draining,
    )


def engine_status_from_proto(msg: common_pb2.EngineStatus) -> EngineStatus:
    if msg.role not in _ROLE_FROM_PROTO:
        raise ValueError(f"engine role must be prefill or decode, got {common_pb2.EngineRole.Name(msg.role)}")
    return EngineStatus(
        engine_id=msg.engine_id,
        role=_ROLE_FROM_PROTO[msg.role],
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
        unfinished_prefill_tokens=msg.unfinished_prefill_tokens,
        draining=msg.draining,
        nics=tuple(
            NICStatus(n.name, n.configured_gbps, n.queue_bytes, n.active_transfers, n.bytes_total) for n in msg.nics
        ),
    )


def nic_status_to_proto(nic: NICStatus) -> fabric_pb2.NICStatus:
    return fabric_pb2.NICStatus(
        name=nic.name,
        configured_gbps=nic.configured_gbps,
        queue_bytes=nic.queue_bytes,
        active_transfers=nic.active_transfers,
        bytes_total=nic.bytes_total,
    )


# --- prefill ----------------------------------------------------------------------------------


def prefill_request_to_proto(request: PrefillRequest) -> prefill_pb2.PrefillRequest:
    return prefill_pb2.PrefillRequest(
        request_id=request.request_id,
        session_id=request.session_id,
        tenant=request.tenant,
        token_ids=request.token_ids,
        sampling=sampling_to_proto(request.sampling),
        store_hit_blocks=request.store_hit_blocks,
        decode_address=request.decode_address,
        kv_path=kv_path_to_proto(request.plan.path),
        relay_address=request.plan.relay_address,
        relay_blocks=request.plan.relay_blocks,
        relay_hbm_first=request.plan.relay_hbm_first,
        segments=None if request.segments is None else prompt_segments_to_proto(request.segments),
        priority=request.priority,
        store_tail_tokens=request.store_tail_tokens,
        service_rank=request.service_rank,
        context=context_to_proto(request.context),
    )


def prefill_request_from_proto(msg: prefill_pb2.PrefillRequest) -> PrefillRequest:
    return PrefillRequest(
        request_id=msg.request_id,
        session_id=msg.session_id,
        tenant=msg.tenant,
        token_ids=list(msg.token_ids),
        sampling=sampling_from_proto(msg.sampling),
        store_hit_blocks=msg.store_hit_blocks,
        decode_address=msg.decode_address,
        plan=LoadPlan(kv_path_from_proto(msg.kv_path), msg.relay_address, msg.relay_blocks, msg.relay_hbm_first),
        segments=prompt_segments_from_proto(msg.segments, msg.token_ids) if msg.HasField("segments") else None,
        priority=msg.priority,
        store_tail_tokens=msg.store_tail_tokens,
        service_rank=msg.service_rank,
        context=context_from_proto(msg.context) if msg.HasField("context") else None,
    )


def prefill_result_to_proto(result: PrefillResult) -> prefill_pb2.PrefillResponse:
    fields = dict(result.__dict__, kv_path=kv_path_to_proto(result.kv_path))
    first = fields.pop("first_logprob")
    if first is not None:
        fields["first_logprob"] = logprob_to_proto(first)
    fields["context"] = context_to_proto(fields["context"])
    return prefill_pb2.PrefillResponse(**fields)


def prefill_result_from_proto(msg: prefill_pb2.PrefillResponse) -> PrefillResult:
    return PrefillResult(
        first_token=msg.first_token,
        prompt_tokens=msg.prompt_tokens,
        cached_tokens=msg.cached_tokens,
        engine_cached_tokens=msg.engine_cached_tokens,
        loaded_blocks=msg.loaded_blocks,
        persisted_blocks=msg.persisted_blocks,
        handoff_blocks=msg.handoff_blocks,
        finished=msg.finished,
        finish_reason=msg.finish_reason,
        kv_path=kv_path_from_proto(msg.kv_path),
        relayed_blocks=msg.relayed_blocks,
        handoff_bytes=msg.handoff_bytes,
        handoff_held_blocks=msg.handoff_held_blocks,
        handoff_failed=msg.handoff_failed,
        first_logprob=logprob_from_proto(msg.first_logprob) if msg.HasField("first_logprob") else None,
        context=context_from_proto(msg.context) if msg.HasField("context") else None,
    )


def context_to_proto(layout: ContextLayout | None) -> common_pb2.ContextLayout | None:
    if layout is None:
        return None
    pieces = [
        common_pb2.ContextPiece(start=p.start, end=p.end, block_id=p.block_id, master_id=p.master_id or b"")
        for p in layout.pieces
    ]
    return common_pb2.ContextLayout(num_tokens=layout.num_tokens, pieces=pieces, tokens_digest=layout.tokens_digest)


def context_from_proto(msg: common_pb2.ContextLayout) -> ContextLayout:
    """ValueError for pieces that do not tile [0, num_tokens) in order."""
    pieces = tuple(Piece(p.start, p.end, bytes(p.block_id), bytes(p.master_id) or None) for p in msg.pieces)
    at = 0
    for i, piece in enumerate(pieces):
        if piece.start != at or piece.end <= piece.start:
            raise ValueError(
                f"context.pieces[{i}]: rows [{piece.start}, {piece.end}) must start at {at} and be non-empty"
            )
        at = piece.end
    if at != msg.num_tokens:
        raise ValueError(f"context: the pieces cover {at} tokens, num_tokens is {msg.num_tokens}")
    return ContextLayout(msg.num_tokens, pieces, bytes(msg.tokens_digest))


# --- decode -----------------------------------------------------------------------------------


def generate_request_to_proto(request: GenerateRequest) -> decode_pb2.GenerateRequest:
    return decode_pb2.GenerateRequest(
        request_id=request.request_id,
        session_id=request.session_id,
        tenant=request.tenant,
        token_ids=request.token_ids,
        prompt_tokens=request.prompt_tokens,
        sampling=sampling_to_proto(request.sampling),
        priority=request.priority,
        persist_tail=request.persist_tail,
        context=context_to_proto(request.context),
    )


def generate_request_from_proto(msg: decode_pb2.GenerateRequest) -> GenerateRequest:
    return GenerateRequest(
        request_id=msg.request_id,
        session_id=msg.session_id,
        tenant=msg.tenant,
        token_ids=list(msg.token_ids),
        prompt_tokens=msg.prompt_tokens,
        sampling=sampling_from_proto(msg.sampling),
        priority=msg.priority,
        persist_tail=msg.persist_tail,
        context=context_from_proto(msg.context) if msg.HasField("context") else None,
    )


def generate_chunk_to_proto(chunk: GenerateChunk) -> decode_pb2.GenerateChunk:
    fields = dict(chunk.__dict__, logprobs=[logprob_to_proto(e) for e in chunk.logprobs])
    return decode_pb2.GenerateChunk(**fields)


def generate_chunk_from_proto(msg: decode_pb2.GenerateChunk) -> GenerateChunk:
    return GenerateChunk(
        token_ids=list(msg.token_ids),
        finished=msg.finished,
        finish_reason=msg.finish_reason,
        cached_tokens=msg.cached_tokens,
        persisted_blocks=msg.persisted_blocks,
        logprobs=[logprob_from_proto(e) for e in msg.logprobs],
    )


# --- scheduler client API and tool events -----------------------------------------------------


def turn_chunk_to_proto(event: TurnEvent) -> scheduler_pb2.TurnChunk:
    chunk = scheduler_pb2.TurnChunk(
        token_ids=event.token_ids,
        text=event.text,
        finished=event.finished,
        finish_reason=event.finish_reason,
        completion_tokens=event.completion_tokens,
        logprobs=[logprob_to_proto(e) for e in event.logprobs],
    )
    if event.metadata is not None:
        chunk.metadata.CopyFrom(scheduler_pb2.TurnMetadata(**event.metadata.__dict__))
    return chunk


def tool_call_to_proto(call: ToolCall) -> scheduler_pb2.ToolCallEvent:
    return scheduler_pb2.ToolCallEvent(**call.__dict__)


def tool_call_from_proto(msg: scheduler_pb2.ToolCallEvent) -> ToolCall:
    return ToolCall(
        session_id=msg.session_id,
        tool=msg.tool,
        call_id=msg.call_id,
        start_unix_s=msg.start_unix_s,
        predicted_duration_s=msg.predicted_duration_s,
        actual_duration_s=msg.actual_duration_s,
        ok=msg.ok,
        caller_predicted_s=msg.caller_predicted_s,
    )


def agent_info_to_proto(info: AgentInfo, request: scheduler_pb2.OpenSessionRequest) -> None:
    """Fill the agent-aware fields of an OpenSessionRequest."""
    request.agent = info.agent
    request.parents.extend(info.parents)
    request.critical = info.critical
    request.priority = info.priority


def agent_info_from_proto(msg: scheduler_pb2.OpenSessionRequest) -> AgentInfo:
    """ValueError naming the field when it is out of range (INVALID_ARGUMENT)."""
    try:
        return AgentInfo(msg.agent, tuple(msg.parents), msg.critical, msg.priority)
    except ValueError as exc:
        raise ValueError(f"OpenSessionRequest.{exc}") from None


def block_ids_to_proto(block_ids: list[bytes]) -> decode_pb2.HeldBlocksRequest:
    """The block-id list of a decode engine's Lookup, DropKV and PrefetchKV."""
    return decode_pb2.HeldBlocksRequest(block_ids=block_ids)


# --- shared context across agents (TokenDance) ------------------------------------------------

_MODE_TO_PROTO = {
    ReuseMode.EXACT: common_pb2.ReusePolicy.MODE_EXACT,
    ReuseMode.REUSE: common_pb2.ReusePolicy.MODE_REUSE,
}
_MODE_FROM_PROTO = {
    common_pb2.ReusePolicy.MODE_UNSPECIFIED: ReuseMode.REUSE,
    **{v: k for k, v in _MODE_TO_PROTO.items()},
}


def reuse_policy_to_proto(policy: ReusePolicy) -> common_pb2.ReusePolicy:
    msg = common_pb2.ReusePolicy(mode=_MODE_TO_PROTO[policy.mode])
    if not policy.exact:
        msg.recompute_fraction = policy.recompute_fraction
    return msg


def reuse_policy_from_proto(msg: common_pb2.ReusePolicy, field: str = "reuse") -> ReusePolicy:
    """ValueError naming `field` for an unknown mode or a fraction out of [0, 1] (or with exact)."""
    mode = _MODE_FROM_PROTO.get(msg.mode)
    if mode is None:
        raise ValueError(f"{field}.mode: unknown reuse mode {msg.mode}")
    if mode is ReuseMode.EXACT:
        if msg.HasField("recompute_fraction"):
            raise ValueError(f"{field}: recompute_fraction applies to mode reuse only, not exact")
        return ReusePolicy(mode)
    if not msg.HasField("recompute_fraction"):
        return ReusePolicy(mode)
    # float32 on the wire: 0.15 arrives as 0.15000000596; six digits are all a fraction means.
    try:
        return ReusePolicy(mode, round(float(msg.recompute_fraction), 6))
    except ValueError as exc:
        raise ValueError(f"{field}: {exc}") from None


def turn_segments_to_proto(segments: TurnSegments) -> scheduler_pb2.TurnSegments:
    return scheduler_pb2.TurnSegments(
        round=segments.round_index,
        shared=[
            scheduler_pb2.SharedBlockRef(content_id=ref.content_id, token_ids=ref.token_ids, text=ref.text)
            for ref in segments.shared
        ],
        reuse=reuse_policy_to_proto(segments.reuse),
    )


def turn_segments_from_proto(msg: scheduler_pb2.TurnRequest) -> TurnSegments | None:
    """The turn's segments, validated (ValueError naming the field); None for a plain turn."""
    if not msg.HasField("segments"):
        return None
    wire = msg.segments
    shared = tuple(SharedRef(ref.content_id, tuple(ref.token_ids), ref.text) for ref in wire.shared)
    reuse = reuse_policy_from_proto(wire.reuse, "segments.reuse") if wire.HasField("reuse") else ReusePolicy()
    try:
        return TurnSegments(wire.round, shared, reuse)
    except ValueError as exc:
        raise ValueError(f"segments.{exc}") from None


def prompt_segments_to_proto(prompt: SegmentedPrompt) -> common_pb2.PromptSegments:
    """The spans of the prompt's shared blocks: their tokens travel once, in the request's token_ids."""
    return common_pb2.PromptSegments(
        shared=[
            common_pb2.SharedSpan(
                content_id=span.block.content_id,
                round=span.block.round_index,
                start=span.start,
                length=len(span.block.token_ids),
            )
            for span in prompt.shared_spans()
        ],
        reuse=reuse_policy_to_proto(prompt.reuse),
    )


def prompt_segments_from_proto(msg: common_pb2.PromptSegments, token_ids: Sequence[int]) -> SegmentedPrompt:
    """`token_ids` cut into segments at the shared spans; ValueError for spans out of order,
    overlapping, empty or past the prompt."""
    segments: list[Segment] = []
    at = 0
    for i, span in enumerate(msg.shared):
        end = span.start + span.length
        if span.length == 0 or span.start < at or end > len(token_ids):
            raise ValueError(
                f"segments.shared[{i}] ({span.content_id!r}): span [{span.start}, {end}) must be non-empty, "
                f"after the previous span (ends at {at}) and within the prompt ({len(token_ids)} tokens)"
            )
        if span.start > at:
            segments.append(PrivateSegment(tuple(token_ids[at : span.start])))
        segments.append(SharedBlock(span.content_id, span.round, tuple(token_ids[span.start : end])))
        at = end
    if at < len(token_ids):
        segments.append(PrivateSegment(tuple(token_ids[at:])))
    reuse = reuse_policy_from_proto(msg.reuse, "segments.reuse") if msg.HasField("reuse") else ReusePolicy()
    return SegmentedPrompt(tuple(segments), reuse)


def kv_hint_to_proto(block_ids: list[bytes], hint: KVHint) -> decode_pb2.HintKVRequest:
    return decode_pb2.HintKVRequest(
        block_ids=block_ids, priority=hint.priority, next_use_in_s=hint.next_use_in_s, pin_s=hint.pin_s
    )


def kv_hint_from_proto(msg: decode_pb2.HintKVRequest) -> tuple[list[bytes], KVHint]:
    """ValueError naming the field when it is out of range (INVALID_ARGUMENT)."""
    try:
        hint = KVHint(
            msg.priority if msg.HasField("priority") else None,
            msg.next_use_in_s if msg.HasField("next_use_in_s") else None,
            msg.pin_s,
        )
    except ValueError as exc:
        raise ValueError(f"HintKVRequest.{exc}") from None
    return list(msg.block_ids), hint
