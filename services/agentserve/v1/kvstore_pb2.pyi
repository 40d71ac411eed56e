from agentserve.v1 import common_pb2 as _common_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class PutRequest(_message.Message):
    __slots__ = ("model_fingerprint", "blocks")
    MODEL_FINGERPRINT_FIELD_NUMBER: _ClassVar[int]
    BLOCKS_FIELD_NUMBER: _ClassVar[int]
    model_fingerprint: str
    blocks: _containers.RepeatedCompositeFieldContainer[_common_pb2.KVBlock]
    def __init__(self, model_fingerprint: _Optional[str] = ..., blocks: _Optional[_Iterable[_Union[_common_pb2.KVBlock, _Mapping]]] = ...) -> None: ...

class PutResponse(_message.Message):
    __slots__ = ("stored", "existing", "bytes_written")
    STORED_FIELD_NUMBER: _ClassVar[int]
    EXISTING_FIELD_NUMBER: _ClassVar[int]
    BYTES_WRITTEN_FIELD_NUMBER: _ClassVar[int]
    stored: int
    existing: int
    bytes_written: int
    def __init__(self, stored: _Optional[int] = ..., existing: _Optional[int] = ..., bytes_written: _Optional[int] = ...) -> None: ...

class GetRequest(_message.Message):
    __slots__ = ("model_fingerprint", "block_ids")
    MODEL_FINGERPRINT_FIELD_NUMBER: _ClassVar[int]
    BLOCK_IDS_FIELD_NUMBER: _ClassVar[int]
    model_fingerprint: str
    block_ids: _containers.RepeatedScalarFieldContainer[bytes]
    def __init__(self, model_fingerprint: _Optional[str] = ..., block_ids: _Optional[_Iterable[bytes]] = ...) -> None: ...

class LookupRequest(_message.Message):
    __slots__ = ("block_ids",)
    BLOCK_IDS_FIELD_NUMBER: _ClassVar[int]
    block_ids: _containers.RepeatedScalarFieldContainer[bytes]
    def __init__(self, block_ids: _Optional[_Iterable[bytes]] = ...) -> None: ...

class LookupResponse(_message.Message):
    __slots__ = ("prefix_blocks",)
    PREFIX_BLOCKS_FIELD_NUMBER: _ClassVar[int]
    prefix_blocks: int
    def __init__(self, prefix_blocks: _Optional[int] = ...) -> None: ...

class StatsRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class StatsResponse(_message.Message):
    __slots__ = ("blocks", "bytes", "hits", "misses", "corrupt_dropped")
    BLOCKS_FIELD_NUMBER: _ClassVar[int]
    BYTES_FIELD_NUMBER: _ClassVar[int]
    HITS_FIELD_NUMBER: _ClassVar[int]
    MISSES_FIELD_NUMBER: _ClassVar[int]
    CORRUPT_DROPPED_FIELD_NUMBER: _ClassVar[int]
    blocks: int
    bytes: int
    hits: int
    misses: int
    corrupt_dropped: int
    def __init__(self, blocks: _Optional[int] = ..., bytes: _Optional[int] = ..., hits: _Optional[int] = ..., misses: _Optional[int] = ..., corrupt_dropped: _Optional[int] = ...) -> None: ...
