from agentserve.v1 import common_pb2 as _common_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class KVPath(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    KV_PATH_UNSPECIFIED: _ClassVar[KVPath]
    KV_PATH_A: _ClassVar[KVPath]
    KV_PATH_B: _ClassVar[KVPath]
    KV_PATH_SPLIT: _ClassVar[KVPath]
KV_PATH_UNSPECIFIED: KVPath
KV_PATH_A: KVPath
KV_PATH_B: KVPath
KV_PATH_SPLIT: KVPath

class PrefillRequest(_message.Message):
    __slots__ = ("request_id", "session_id", "tenant", "token_ids", "sampling", "store_hit_blocks", "decode_address", "kv_path", "relay_address", "relay_blocks", "segments", "priority", "relay_hbm_first", "store_tail_tokens", "service_rank", "context")
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    SESSION_ID_FIELD_NUMBER: _ClassVar[int]
    TENANT_FIELD_NUMBER: _ClassVar[int]
    TOKEN_IDS_FIELD_NUMBER: _ClassVar[int]
    SAMPLING_FIELD_NUMBER: _ClassVar[int]
    STORE_HIT_BLOCKS_FIELD_NUMBER: _ClassVar[int]
    DECODE_ADDRESS_FIELD_NUMBER: _ClassVar[int]
    KV_PATH_FIELD_NUMBER: _ClassVar[int]
    RELAY_ADDRESS_FIELD_NUMBER: _ClassVar[int]
    RELAY_BLOCKS_FIELD_NUMBER: _ClassVar[int]
    SEGMENTS_FIELD_NUMBER: _ClassVar[int]
    PRIORITY_FIELD_NUMBER: _ClassVar[int]
    RELAY_HBM_FIRST_FIELD_NUMBER: _ClassVar[int]
    STORE_TAIL_TOKENS_FIELD_NUMBER: _ClassVar[int]
    SERVICE_RANK_FIELD_NUMBER: _ClassVar[int]
    CONTEXT_FIELD_NUMBER: _ClassVar[int]
    request_id: str
    session_id: str
    tenant: str
    token_ids: _containers.RepeatedScalarFieldContainer[int]
    sampling: _common_pb2.SamplingParams
    store_hit_blocks: int
    decode_address: str
    kv_path: KVPath
    relay_address: str
    relay_blocks: int
    segments: _common_pb2.PromptSegments
    priority: int
    relay_hbm_first: bool
    store_tail_tokens: int
    service_rank: int
    context: _common_pb2.ContextLayout
    def __init__(self, request_id: _Optional[str] = ..., session_id: _Optional[str] = ..., tenant: _Optional[str] = ..., token_ids: _Optional[_Iterable[int]] = ..., sampling: _Optional[_Union[_common_pb2.SamplingParams, _Mapping]] = ..., store_hit_blocks: _Optional[int] = ..., decode_address: _Optional[str] = ..., kv_path: _Optional[_Union[KVPath, str]] = ..., relay_address: _Optional[str] = ..., relay_blocks: _Optional[int] = ..., segments: _Optional[_Union[_common_pb2.PromptSegments, _Mapping]] = ..., priority: _Optional[int] = ..., relay_hbm_first: _Optional[bool] = ..., store_tail_tokens: _Optional[int] = ..., service_rank: _Optional[int] = ..., context: _Optional[_Union[_common_pb2.ContextLayout, _Mapping]] = ...) -> None: ...

class PrefillResponse(_message.Message):
    __slots__ = ("first_token", "prompt_tokens", "cached_tokens", "engine_cached_tokens", "loaded_blocks", "persisted_blocks", "handoff_blocks", "finished", "finish_reason", "kv_path", "relayed_blocks", "handoff_bytes", "handoff_held_blocks", "handoff_failed", "first_logprob", "context")
    FIRST_TOKEN_FIELD_NUMBER: _ClassVar[int]
    PROMPT_TOKENS_FIELD_NUMBER: _ClassVar[int]
    CACHED_TOKENS_FIELD_NUMBER: _ClassVar[int]
    ENGINE_CACHED_TOKENS_FIELD_NUMBER: _ClassVar[int]
    LOADED_BLOCKS_FIELD_NUMBER: _ClassVar[int]
    PERSISTED_BLOCKS_FIELD_NUMBER: _ClassVar[int]
    HANDOFF_BLOCKS_FIELD_NUMBER: _ClassVar[int]
    FINISHED_FIELD_NUMBER: _ClassVar[int]
    FINISH_REASON_FIELD_NUMBER: _ClassVar[int]
    KV_PATH_FIELD_NUMBER: _ClassVar[int]
    RELAYED_BLOCKS_FIELD_NUMBER: _ClassVar[int]
    HANDOFF_BYTES_FIELD_NUMBER: _ClassVar[int]
    HANDOFF_HELD_BLOCKS_FIELD_NUMBER: _ClassVar[int]
    HANDOFF_FAILED_FIELD_NUMBER: _ClassVar[int]
    FIRST_LOGPROB_FIELD_NUMBER: _ClassVar[int]
    CONTEXT_FIELD_NUMBER: _ClassVar[int]
    first_token: int
    prompt_tokens: int
    cached_tokens: int
    engine_cached_tokens: int
    loaded_blocks: int
    persisted_blocks: int
    handoff_blocks: int
    finished: bool
    finish_reason: str
    kv_path: KVPath
    relayed_blocks: int
    handoff_bytes: int
    handoff_held_blocks: int
    handoff_failed: bool
    first_logprob: _common_pb2.TokenLogprob
    context: _common_pb2.ContextLayout
    def __init__(self, first_token: _Optional[int] = ..., prompt_tokens: _Optional[int] = ..., cached_tokens: _Optional[int] = ..., engine_cached_tokens: _Optional[int] = ..., loaded_blocks: _Optional[int] = ..., persisted_blocks: _Optional[int] = ..., handoff_blocks: _Optional[int] = ..., finished: _Optional[bool] = ..., finish_reason: _Optional[str] = ..., kv_path: _Optional[_Union[KVPath, str]] = ..., relayed_blocks: _Optional[int] = ..., handoff_bytes: _Optional[int] = ..., handoff_held_blocks: _Optional[int] = ..., handoff_failed: _Optional[bool] = ..., first_logprob: _Optional[_Union[_common_pb2.TokenLogprob, _Mapping]] = ..., context: _Optional[_Union[_common_pb2.ContextLayout, _Mapping]] = ...) -> None: ...
