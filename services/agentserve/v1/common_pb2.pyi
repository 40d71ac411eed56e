from agentserve.v1 import fabric_pb2 as _fabric_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class EngineRole(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    ENGINE_ROLE_UNSPECIFIED: _ClassVar[EngineRole]
    ENGINE_ROLE_PREFILL: _ClassVar[EngineRole]
    ENGINE_ROLE_DECODE: _ClassVar[EngineRole]
ENGINE_ROLE_UNSPECIFIED: EngineRole
ENGINE_ROLE_PREFILL: EngineRole
ENGINE_ROLE_DECODE: EngineRole

class SamplingParams(_message.Message):
    __slots__ = ("max_tokens", "temperature", "top_p", "seed", "ignore_eos", "min_tokens", "logprobs", "structured")
    MAX_TOKENS_FIELD_NUMBER: _ClassVar[int]
    TEMPERATURE_FIELD_NUMBER: _ClassVar[int]
    TOP_P_FIELD_NUMBER: _ClassVar[int]
    SEED_FIELD_NUMBER: _ClassVar[int]
    IGNORE_EOS_FIELD_NUMBER: _ClassVar[int]
    MIN_TOKENS_FIELD_NUMBER: _ClassVar[int]
    LOGPROBS_FIELD_NUMBER: _ClassVar[int]
    STRUCTURED_FIELD_NUMBER: _ClassVar[int]
    max_tokens: int
    temperature: float
    top_p: float
    seed: int
    ignore_eos: bool
    min_tokens: int
    logprobs: int
    structured: StructuredOutput
    def __init__(self, max_tokens: _Optional[int] = ..., temperature: _Optional[float] = ..., top_p: _Optional[float] = ..., seed: _Optional[int] = ..., ignore_eos: _Optional[bool] = ..., min_tokens: _Optional[int] = ..., logprobs: _Optional[int] = ..., structured: _Optional[_Union[StructuredOutput, _Mapping]] = ...) -> None: ...

class TokenLogprob(_message.Message):
    __slots__ = ("token_id", "logprob", "top_token_ids", "top_logprobs")
    TOKEN_ID_FIELD_NUMBER: _ClassVar[int]
    LOGPROB_FIELD_NUMBER: _ClassVar[int]
    TOP_TOKEN_IDS_FIELD_NUMBER: _ClassVar[int]
    TOP_LOGPROBS_FIELD_NUMBER: _ClassVar[int]
    token_id: int
    logprob: float
    top_token_ids: _containers.RepeatedScalarFieldContainer[int]
    top_logprobs: _containers.RepeatedScalarFieldContainer[float]
    def __init__(self, token_id: _Optional[int] = ..., logprob: _Optional[float] = ..., top_token_ids: _Optional[_Iterable[int]] = ..., top_logprobs: _Optional[_Iterable[float]] = ...) -> None: ...

class StructuredOutput(_message.Message):
    __slots__ = ("kind", "schema", "tools", "single_call")
    class Kind(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
        __slots__ = ()
        KIND_UNSPECIFIED: _ClassVar[StructuredOutput.Kind]
        KIND_JSON_OBJECT: _ClassVar[StructuredOutput.Kind]
        KIND_JSON_SCHEMA: _ClassVar[StructuredOutput.Kind]
        KIND_TOOL_CALL: _ClassVar[StructuredOutput.Kind]
        KIND_TEXT_OR_TOOL_CALLS: _ClassVar[StructuredOutput.Kind]
    KIND_UNSPECIFIED: StructuredOutput.Kind
    KIND_JSON_OBJECT: StructuredOutput.Kind
    KIND_JSON_SCHEMA: StructuredOutput.Kind
    KIND_TOOL_CALL: StructuredOutput.Kind
    KIND_TEXT_OR_TOOL_CALLS: StructuredOutput.Kind
    KIND_FIELD_NUMBER: _ClassVar[int]
    SCHEMA_FIELD_NUMBER: _ClassVar[int]
    TOOLS_FIELD_NUMBER: _ClassVar[int]
    SINGLE_CALL_FIELD_NUMBER: _ClassVar[int]
    kind: StructuredOutput.Kind
    schema: str
    tools: _containers.RepeatedCompositeFieldContainer[ToolSchema]
    single_call: bool
    def __init__(self, kind: _Optional[_Union[StructuredOutput.Kind, str]] = ..., schema: _Optional[str] = ..., tools: _Optional[_Iterable[_Union[ToolSchema, _Mapping]]] = ..., single_call: _Optional[bool] = ...) -> None: ...

class ToolSchema(_message.Message):
    __slots__ = ("name", "parameters")
    NAME_FIELD_NUMBER: _ClassVar[int]
    PARAMETERS_FIELD_NUMBER: _ClassVar[int]
    name: str
    parameters: str
    def __init__(self, name: _Optional[str] = ..., parameters: _Optional[str] = ...) -> None: ...

class KVBlock(_message.Message):
    __slots__ = ("block_id", "data")
    BLOCK_ID_FIELD_NUMBER: _ClassVar[int]
    DATA_FIELD_NUMBER: _ClassVar[int]
    block_id: bytes
    data: bytes
    def __init__(self, block_id: _Optional[bytes] = ..., data: _Optional[bytes] = ...) -> None: ...

class EngineStatus(_message.Message):
    __slots__ = ("engine_id", "role", "address", "model_name", "model_fingerprint", "block_size", "running", "waiting", "free_kv_blocks", "total_kv_blocks", "vocab_size", "max_context", "nics", "kv_block_bytes", "unfinished_prefill_tokens", "draining")
    ENGINE_ID_FIELD_NUMBER: _ClassVar[int]
    ROLE_FIELD_NUMBER: _ClassVar[int]
    ADDRESS_FIELD_NUMBER: _ClassVar[int]
    MODEL_NAME_FIELD_NUMBER: _ClassVar[int]
    MODEL_FINGERPRINT_FIELD_NUMBER: _ClassVar[int]
    BLOCK_SIZE_FIELD_NUMBER: _ClassVar[int]
    RUNNING_FIELD_NUMBER: _ClassVar[int]
    WAITING_FIELD_NUMBER: _ClassVar[int]
    FREE_KV_BLOCKS_FIELD_NUMBER: _ClassVar[int]
    TOTAL_KV_BLOCKS_FIELD_NUMBER: _ClassVar[int]
    VOCAB_SIZE_FIELD_NUMBER: _ClassVar[int]
    MAX_CONTEXT_FIELD_NUMBER: _ClassVar[int]
    NICS_FIELD_NUMBER: _ClassVar[int]
    KV_BLOCK_BYTES_FIELD_NUMBER: _ClassVar[int]
    UNFINISHED_PREFILL_TOKENS_FIELD_NUMBER: _ClassVar[int]
    DRAINING_FIELD_NUMBER: _ClassVar[int]
    engine_id: str
    role: EngineRole
    address: str
    model_name: str
    model_fingerprint: str
    block_size: int
    running: int
    waiting: int
    free_kv_blocks: int
    total_kv_blocks: int
    vocab_size: int
    max_context: int
    nics: _containers.RepeatedCompositeFieldContainer[_fabric_pb2.NICStatus]
    kv_block_bytes: int
    unfinished_prefill_tokens: int
    draining: bool
    def __init__(self, engine_id: _Optional[str] = ..., role: _Optional[_Union[EngineRole, str]] = ..., address: _Optional[str] = ..., model_name: _Optional[str] = ..., model_fingerprint: _Optional[str] = ..., block_size: _Optional[int] = ..., running: _Optional[int] = ..., waiting: _Optional[int] = ..., free_kv_blocks: _Optional[int] = ..., total_kv_blocks: _Optional[int] = ..., vocab_size: _Optional[int] = ..., max_context: _Optional[int] = ..., nics: _Optional[_Iterable[_Union[_fabric_pb2.NICStatus, _Mapping]]] = ..., kv_block_bytes: _Optional[int] = ..., unfinished_prefill_tokens: _Optional[int] = ..., draining: _Optional[bool] = ...) -> None: ...

class ReusePolicy(_message.Message):
    __slots__ = ("mode", "recompute_fraction")
    class Mode(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
        __slots__ = ()
        MODE_UNSPECIFIED: _ClassVar[ReusePolicy.Mode]
        MODE_EXACT: _ClassVar[ReusePolicy.Mode]
        MODE_REUSE: _ClassVar[ReusePolicy.Mode]
    MODE_UNSPECIFIED: ReusePolicy.Mode
    MODE_EXACT: ReusePolicy.Mode
    MODE_REUSE: ReusePolicy.Mode
    MODE_FIELD_NUMBER: _ClassVar[int]
    RECOMPUTE_FRACTION_FIELD_NUMBER: _ClassVar[int]
    mode: ReusePolicy.Mode
    recompute_fraction: float
    def __init__(self, mode: _Optional[_Union[ReusePolicy.Mode, str]] = ..., recompute_fraction: _Optional[float] = ...) -> None: ...

class SharedSpan(_message.Message):
    __slots__ = ("content_id", "round", "start", "length")
    CONTENT_ID_FIELD_NUMBER: _ClassVar[int]
    ROUND_FIELD_NUMBER: _ClassVar[int]
    START_FIELD_NUMBER: _ClassVar[int]
    LENGTH_FIELD_NUMBER: _ClassVar[int]
    content_id: str
    round: int
    start: int
    length: int
    def __init__(self, content_id: _Optional[str] = ..., round: _Optional[int] = ..., start: _Optional[int] = ..., length: _Optional[int] = ...) -> None: ...

class PromptSegments(_message.Message):
    __slots__ = ("shared", "reuse")
    SHARED_FIELD_NUMBER: _ClassVar[int]
    REUSE_FIELD_NUMBER: _ClassVar[int]
    shared: _containers.RepeatedCompositeFieldContainer[SharedSpan]
    reuse: ReusePolicy
    def __init__(self, shared: _Optional[_Iterable[_Union[SharedSpan, _Mapping]]] = ..., reuse: _Optional[_Union[ReusePolicy, _Mapping]] = ...) -> None: ...

class ContextPiece(_message.Message):
    __slots__ = ("start", "end", "block_id", "master_id")
    START_FIELD_NUMBER: _ClassVar[int]
    END_FIELD_NUMBER: _ClassVar[int]
    BLOCK_ID_FIELD_NUMBER: _ClassVar[int]
    MASTER_ID_FIELD_NUMBER: _ClassVar[int]
    start: int
    end: int
    block_id: bytes
    master_id: bytes
    def __init__(self, start: _Optional[int] = ..., end: _Optional[int] = ..., block_id: _Optional[bytes] = ..., master_id: _Optional[bytes] = ...) -> None: ...

class ContextLayout(_message.Message):
    __slots__ = ("num_tokens", "pieces", "tokens_digest")
    NUM_TOKENS_FIELD_NUMBER: _ClassVar[int]
    PIECES_FIELD_NUMBER: _ClassVar[int]
    TOKENS_DIGEST_FIELD_NUMBER: _ClassVar[int]
    num_tokens: int
    pieces: _containers.RepeatedCompositeFieldContainer[ContextPiece]
    tokens_digest: bytes
    def __init__(self, num_tokens: _Optional[int] = ..., pieces: _Optional[_Iterable[_Union[ContextPiece, _Mapping]]] = ..., tokens_digest: _Optional[bytes] = ...) -> None: ...
