from agentserve.v1 import common_pb2 as _common_pb2
from agentserve.v1 import fabric_pb2 as _fabric_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class HintKVRequest(_message.Message):
    __slots__ = ("block_ids", "priority", "next_use_in_s", "pin_s")
    BLOCK_IDS_FIELD_NUMBER: _ClassVar[int]
    PRIORITY_FIELD_NUMBER: _ClassVar[int]
    NEXT_USE_IN_S_FIELD_NUMBER: _ClassVar[int]
    PIN_S_FIELD_NUMBER: _ClassVar[int]
    block_ids: _containers.RepeatedScalarFieldContainer[bytes]
    priority: int
    next_use_in_s: float
    pin_s: float
    def __init__(self, block_ids: _Optional[_Iterable[bytes]] = ..., priority: _Optional[int] = ..., next_use_in_s: _Optional[float] = ..., pin_s: _Optional[float] = ...) -> None: ...

class HintKVResponse(_message.Message):
    __slots__ = ("resident",)
    RESIDENT_FIELD_NUMBER: _ClassVar[int]
    resident: int
    def __init__(self, resident: _Optional[int] = ...) -> None: ...

class DropKVResponse(_message.Message):
    __slots__ = ("dropped",)
    DROPPED_FIELD_NUMBER: _ClassVar[int]
    dropped: int
    def __init__(self, dropped: _Optional[int] = ...) -> None: ...

class PrefetchKVResponse(_message.Message):
    __slots__ = ("loaded", "held")
    LOADED_FIELD_NUMBER: _ClassVar[int]
    HELD_FIELD_NUMBER: _ClassVar[int]
    loaded: int
    held: int
    def __init__(self, loaded: _Optional[int] = ..., held: _Optional[int] = ...) -> None: ...

class RelayRequest(_message.Message):
    __slots__ = ("block_ids", "dst", "hbm_first")
    BLOCK_IDS_FIELD_NUMBER: _ClassVar[int]
    DST_FIELD_NUMBER: _ClassVar[int]
    HBM_FIRST_FIELD_NUMBER: _ClassVar[int]
    block_ids: _containers.RepeatedScalarFieldContainer[bytes]
    dst: str
    hbm_first: bool
    def __init__(self, block_ids: _Optional[_Iterable[bytes]] = ..., dst: _Optional[str] = ..., hbm_first: _Optional[bool] = ...) -> None: ...

class HeldBlocksRequest(_message.Message):
    __slots__ = ("block_ids",)
    BLOCK_IDS_FIELD_NUMBER: _ClassVar[int]
    block_ids: _containers.RepeatedScalarFieldContainer[bytes]
    def __init__(self, block_ids: _Optional[_Iterable[bytes]] = ...) -> None: ...

class HeldBlocksResponse(_message.Message):
    __slots__ = ("held",)
    HELD_FIELD_NUMBER: _ClassVar[int]
    held: _containers.RepeatedScalarFieldContainer[bool]
    def __init__(self, held: _Optional[_Iterable[bool]] = ...) -> None: ...

class LoadKVResponse(_message.Message):
    __slots__ = ("imported", "already_present")
    IMPORTED_FIELD_NUMBER: _ClassVar[int]
    ALREADY_PRESENT_FIELD_NUMBER: _ClassVar[int]
    imported: int
    already_present: int
    def __init__(self, imported: _Optional[int] = ..., already_present: _Optional[int] = ...) -> None: ...

class GenerateRequest(_message.Message):
    __slots__ = ("request_id", "session_id", "tenant", "token_ids", "prompt_tokens", "sampling", "priority", "persist_tail", "context")
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    SESSION_ID_FIELD_NUMBER: _ClassVar[int]
    TENANT_FIELD_NUMBER: _ClassVar[int]
    TOKEN_IDS_FIELD_NUMBER: _ClassVar[int]
    PROMPT_TOKENS_FIELD_NUMBER: _ClassVar[int]
    SAMPLING_FIELD_NUMBER: _ClassVar[int]
    PRIORITY_FIELD_NUMBER: _ClassVar[int]
    PERSIST_TAIL_FIELD_NUMBER: _ClassVar[int]
    CONTEXT_FIELD_NUMBER: _ClassVar[int]
    request_id: str
    session_id: str
    tenant: str
    token_ids: _containers.RepeatedScalarFieldContainer[int]
    prompt_tokens: int
    sampling: _common_pb2.SamplingParams
    priority: int
    persist_tail: bool
    context: _common_pb2.ContextLayout
    def __init__(self, request_id: _Optional[str] = ..., session_id: _Optional[str] = ..., tenant: _Optional[str] = ..., token_ids: _Optional[_Iterable[int]] = ..., prompt_tokens: _Optional[int] = ..., sampling: _Optional[_Union[_common_pb2.SamplingParams, _Mapping]] = ..., priority: _Optional[int] = ..., persist_tail: _Optional[bool] = ..., context: _Optional[_Union[_common_pb2.ContextLayout, _Mapping]] = ...) -> None: ...

class GenerateChunk(_message.Message):
    __slots__ = ("token_ids", "finished", "finish_reason", "cached_tokens", "persisted_blocks", "logprobs")
    TOKEN_IDS_FIELD_NUMBER: _ClassVar[int]
    FINISHED_FIELD_NUMBER: _ClassVar[int]
    FINISH_REASON_FIELD_NUMBER: _ClassVar[int]
    CACHED_TOKENS_FIELD_NUMBER: _ClassVar[int]
    PERSISTED_BLOCKS_FIELD_NUMBER: _ClassVar[int]
    LOGPROBS_FIELD_NUMBER: _ClassVar[int]
    token_ids: _containers.RepeatedScalarFieldContainer[int]
    finished: bool
    finish_reason: str
    cached_tokens: int
    persisted_blocks: int
    logprobs: _containers.RepeatedCompositeFieldContainer[_common_pb2.TokenLogprob]
    def __init__(self, token_ids: _Optional[_Iterable[int]] = ..., finished: _Optional[bool] = ..., finish_reason: _Optional[str] = ..., cached_tokens: _Optional[int] = ..., persisted_blocks: _Optional[int] = ..., logprobs: _Optional[_Iterable[_Union[_common_pb2.TokenLogprob, _Mapping]]] = ...) -> None: ...
