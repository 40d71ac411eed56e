from agentserve.v1 import common_pb2 as _common_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class OpenSessionRequest(_message.Message):
    __slots__ = ("tenant", "agent", "parent_session_id", "system_prompt", "parents", "critical", "priority")
    TENANT_FIELD_NUMBER: _ClassVar[int]
    AGENT_FIELD_NUMBER: _ClassVar[int]
    PARENT_SESSION_ID_FIELD_NUMBER: _ClassVar[int]
    SYSTEM_PROMPT_FIELD_NUMBER: _ClassVar[int]
    PARENTS_FIELD_NUMBER: _ClassVar[int]
    CRITICAL_FIELD_NUMBER: _ClassVar[int]
    PRIORITY_FIELD_NUMBER: _ClassVar[int]
    tenant: str
    agent: str
    parent_session_id: str
    system_prompt: str
    parents: _containers.RepeatedScalarFieldContainer[str]
    critical: bool
    priority: int
    def __init__(self, tenant: _Optional[str] = ..., agent: _Optional[str] = ..., parent_session_id: _Optional[str] = ..., system_prompt: _Optional[str] = ..., parents: _Optional[_Iterable[str]] = ..., critical: _Optional[bool] = ..., priority: _Optional[int] = ...) -> None: ...

class OpenSessionResponse(_message.Message):
    __slots__ = ("session_id",)
    SESSION_ID_FIELD_NUMBER: _ClassVar[int]
    session_id: str
    def __init__(self, session_id: _Optional[str] = ...) -> None: ...

class TurnRequest(_message.Message):
    __slots__ = ("session_id", "message", "token_ids", "role", "sampling", "segments")
    SESSION_ID_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_FIELD_NUMBER: _ClassVar[int]
    TOKEN_IDS_FIELD_NUMBER: _ClassVar[int]
    ROLE_FIELD_NUMBER: _ClassVar[int]
    SAMPLING_FIELD_NUMBER: _ClassVar[int]
    SEGMENTS_FIELD_NUMBER: _ClassVar[int]
    session_id: str
    message: str
    token_ids: _containers.RepeatedScalarFieldContainer[int]
    role: str
    sampling: _common_pb2.SamplingParams
    segments: TurnSegments
    def __init__(self, session_id: _Optional[str] = ..., message: _Optional[str] = ..., token_ids: _Optional[_Iterable[int]] = ..., role: _Optional[str] = ..., sampling: _Optional[_Union[_common_pb2.SamplingParams, _Mapping]] = ..., segments: _Optional[_Union[TurnSegments, _Mapping]] = ...) -> None: ...

class SharedBlockRef(_message.Message):
    __slots__ = ("content_id", "token_ids", "text")
    CONTENT_ID_FIELD_NUMBER: _ClassVar[int]
    TOKEN_IDS_FIELD_NUMBER: _ClassVar[int]
    TEXT_FIELD_NUMBER: _ClassVar[int]
    content_id: str
    token_ids: _containers.RepeatedScalarFieldContainer[int]
    text: str
    def __init__(self, content_id: _Optional[str] = ..., token_ids: _Optional[_Iterable[int]] = ..., text: _Optional[str] = ...) -> None: ...

class TurnSegments(_message.Message):
    __slots__ = ("round", "shared", "reuse")
    ROUND_FIELD_NUMBER: _ClassVar[int]
    SHARED_FIELD_NUMBER: _ClassVar[int]
    REUSE_FIELD_NUMBER: _ClassVar[int]
    round: int
    shared: _containers.RepeatedCompositeFieldContainer[SharedBlockRef]
    reuse: _common_pb2.ReusePolicy
    def __init__(self, round: _Optional[int] = ..., shared: _Optional[_Iterable[_Union[SharedBlockRef, _Mapping]]] = ..., reuse: _Optional[_Union[_common_pb2.ReusePolicy, _Mapping]] = ...) -> None: ...

class TurnMetadata(_message.Message):
    __slots__ = ("turn_id", "turn_index", "prompt_tokens", "cached_tokens", "prefill_engine", "decode_engine", "trace_id", "kv_path", "loaded_blocks", "relayed_blocks", "handoff_blocks", "handoff_bytes", "handoff_held_blocks", "span_id", "relay_engine")
    TURN_ID_FIELD_NUMBER: _ClassVar[int]
    TURN_INDEX_FIELD_NUMBER: _ClassVar[int]
    PROMPT_TOKENS_FIELD_NUMBER: _ClassVar[int]
    CACHED_TOKENS_FIELD_NUMBER: _ClassVar[int]
    PREFILL_ENGINE_FIELD_NUMBER: _ClassVar[int]
    DECODE_ENGINE_FIELD_NUMBER: _ClassVar[int]
    TRACE_ID_FIELD_NUMBER: _ClassVar[int]
    KV_PATH_FIELD_NUMBER: _ClassVar[int]
    LOADED_BLOCKS_FIELD_NUMBER: _ClassVar[int]
    RELAYED_BLOCKS_FIELD_NUMBER: _ClassVar[int]
    HANDOFF_BLOCKS_FIELD_NUMBER: _ClassVar[int]
    HANDOFF_BYTES_FIELD_NUMBER: _ClassVar[int]
    HANDOFF_HELD_BLOCKS_FIELD_NUMBER: _ClassVar[int]
    SPAN_ID_FIELD_NUMBER: _ClassVar[int]
    RELAY_ENGINE_FIELD_NUMBER: _ClassVar[int]
    turn_id: str
    turn_index: int
    prompt_tokens: int
    cached_tokens: int
    prefill_engine: str
    decode_engine: str
    trace_id: str
    kv_path: str
    loaded_blocks: int
    relayed_blocks: int
    handoff_blocks: int
    handoff_bytes: int
    handoff_held_blocks: int
    span_id: str
    relay_engine: str
    def __init__(self, turn_id: _Optional[str] = ..., turn_index: _Optional[int] = ..., prompt_tokens: _Optional[int] = ..., cached_tokens: _Optional[int] = ..., prefill_engine: _Optional[str] = ..., decode_engine: _Optional[str] = ..., trace_id: _Optional[str] = ..., kv_path: _Optional[str] = ..., loaded_blocks: _Optional[int] = ..., relayed_blocks: _Optional[int] = ..., handoff_blocks: _Optional[int] = ..., handoff_bytes: _Optional[int] = ..., handoff_held_blocks: _Optional[int] = ..., span_id: _Optional[str] = ..., relay_engine: _Optional[str] = ...) -> None: ...

class TurnChunk(_message.Message):
    __slots__ = ("metadata", "token_ids", "text", "finished", "finish_reason", "completion_tokens", "logprobs")
    METADATA_FIELD_NUMBER: _ClassVar[int]
    TOKEN_IDS_FIELD_NUMBER: _ClassVar[int]
    TEXT_FIELD_NUMBER: _ClassVar[int]
    FINISHED_FIELD_NUMBER: _ClassVar[int]
    FINISH_REASON_FIELD_NUMBER: _ClassVar[int]
    COMPLETION_TOKENS_FIELD_NUMBER: _ClassVar[int]
    LOGPROBS_FIELD_NUMBER: _ClassVar[int]
    metadata: TurnMetadata
    token_ids: _containers.RepeatedScalarFieldContainer[int]
    text: str
    finished: bool
    finish_reason: str
    completion_tokens: int
    logprobs: _containers.RepeatedCompositeFieldContainer[_common_pb2.TokenLogprob]
    def __init__(self, metadata: _Optional[_Union[TurnMetadata, _Mapping]] = ..., token_ids: _Optional[_Iterable[int]] = ..., text: _Optional[str] = ..., finished: _Optional[bool] = ..., finish_reason: _Optional[str] = ..., completion_tokens: _Optional[int] = ..., logprobs: _Optional[_Iterable[_Union[_common_pb2.TokenLogprob, _Mapping]]] = ...) -> None: ...

class CloseSessionRequest(_message.Message):
    __slots__ = ("session_id",)
    SESSION_ID_FIELD_NUMBER: _ClassVar[int]
    session_id: str
    def __init__(self, session_id: _Optional[str] = ...) -> None: ...

class CloseSessionResponse(_message.Message):
    __slots__ = ("turns", "tokens")
    TURNS_FIELD_NUMBER: _ClassVar[int]
    TOKENS_FIELD_NUMBER: _ClassVar[int]
    turns: int
    tokens: int
    def __init__(self, turns: _Optional[int] = ..., tokens: _Optional[int] = ...) -> None: ...

class ListModelsRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class ListModelsResponse(_message.Message):
    __slots__ = ("models",)
    MODELS_FIELD_NUMBER: _ClassVar[int]
    models: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, models: _Optional[_Iterable[str]] = ...) -> None: ...

class RegisterResponse(_message.Message):
    __slots__ = ("heartbeat_interval_ms", "peers")
    HEARTBEAT_INTERVAL_MS_FIELD_NUMBER: _ClassVar[int]
    PEERS_FIELD_NUMBER: _ClassVar[int]
    heartbeat_interval_ms: int
    peers: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, heartbeat_interval_ms: _Optional[int] = ..., peers: _Optional[_Iterable[str]] = ...) -> None: ...

class DeregisterResponse(_message.Message):
    __slots__ = ("deregistered",)
    DEREGISTERED_FIELD_NUMBER: _ClassVar[int]
    deregistered: bool
    def __init__(self, deregistered: _Optional[bool] = ...) -> None: ...

class DrainEngineRequest(_message.Message):
    __slots__ = ("engine",)
    ENGINE_FIELD_NUMBER: _ClassVar[int]
    engine: str
    def __init__(self, engine: _Optional[str] = ...) -> None: ...

class DrainEngineResponse(_message.Message):
    __slots__ = ("engine_id", "role", "busy")
    ENGINE_ID_FIELD_NUMBER: _ClassVar[int]
    ROLE_FIELD_NUMBER: _ClassVar[int]
    BUSY_FIELD_NUMBER: _ClassVar[int]
    engine_id: str
    role: _common_pb2.EngineRole
    busy: int
    def __init__(self, engine_id: _Optional[str] = ..., role: _Optional[_Union[_common_pb2.EngineRole, str]] = ..., busy: _Optional[int] = ...) -> None: ...

class HeartbeatResponse(_message.Message):
    __slots__ = ("known", "peers", "drain")
    KNOWN_FIELD_NUMBER: _ClassVar[int]
    PEERS_FIELD_NUMBER: _ClassVar[int]
    DRAIN_FIELD_NUMBER: _ClassVar[int]
    known: bool
    peers: _containers.RepeatedScalarFieldContainer[str]
    drain: bool
    def __init__(self, known: _Optional[bool] = ..., peers: _Optional[_Iterable[str]] = ..., drain: _Optional[bool] = ...) -> None: ...

class ToolCallEvent(_message.Message):
    __slots__ = ("session_id", "tool", "call_id", "start_unix_s", "predicted_duration_s", "actual_duration_s", "ok", "caller_predicted_s")
    SESSION_ID_FIELD_NUMBER: _ClassVar[int]
    TOOL_FIELD_NUMBER: _ClassVar[int]
    CALL_ID_FIELD_NUMBER: _ClassVar[int]
    START_UNIX_S_FIELD_NUMBER: _ClassVar[int]
    PREDICTED_DURATION_S_FIELD_NUMBER: _ClassVar[int]
    ACTUAL_DURATION_S_FIELD_NUMBER: _ClassVar[int]
    OK_FIELD_NUMBER: _ClassVar[int]
    CALLER_PREDICTED_S_FIELD_NUMBER: _ClassVar[int]
    session_id: str
    tool: str
    call_id: str
    start_unix_s: float
    predicted_duration_s: float
    actual_duration_s: float
    ok: bool
    caller_predicted_s: float
    def __init__(self, session_id: _Optional[str] = ..., tool: _Optional[str] = ..., call_id: _Optional[str] = ..., start_unix_s: _Optional[float] = ..., predicted_duration_s: _Optional[float] = ..., actual_duration_s: _Optional[float] = ..., ok: _Optional[bool] = ..., caller_predicted_s: _Optional[float] = ...) -> None: ...

class ToolCallAck(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...
