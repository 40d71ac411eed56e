from agentserve.v1 import common_pb2 as _common_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class Tier(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    TIER_NONE: _ClassVar[Tier]
    TIER_DRAM: _ClassVar[Tier]
    TIER_SSD: _ClassVar[Tier]
TIER_NONE: Tier
TIER_DRAM: Tier
TIER_SSD: Tier

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

class WriteRequest(_message.Message):
    __slots__ = ("model_fingerprint", "block")
    MODEL_FINGERPRINT_FIELD_NUMBER: _ClassVar[int]
    BLOCK_FIELD_NUMBER: _ClassVar[int]
    model_fingerprint: str
    block: _common_pb2.KVBlock
    def __init__(self, model_fingerprint: _Optional[str] = ..., block: _Optional[_Union[_common_pb2.KVBlock, _Mapping]] = ...) -> None: ...

class GetRequest(_message.Message):
    __slots__ = ("model_fingerprint", "block_ids")
    MODEL_FINGERPRINT_FIELD_NUMBER: _ClassVar[int]
    BLOCK_IDS_FIELD_NUMBER: _ClassVar[int]
    model_fingerprint: str
    block_ids: _containers.RepeatedScalarFieldContainer[bytes]
    def __init__(self, model_fingerprint: _Optional[str] = ..., block_ids: _Optional[_Iterable[bytes]] = ...) -> None: ...

class ReadRequest(_message.Message):
    __slots__ = ("model_fingerprint", "block_ids", "layer_start", "layer_stop")
    MODEL_FINGERPRINT_FIELD_NUMBER: _ClassVar[int]
    BLOCK_IDS_FIELD_NUMBER: _ClassVar[int]
    LAYER_START_FIELD_NUMBER: _ClassVar[int]
    LAYER_STOP_FIELD_NUMBER: _ClassVar[int]
    model_fingerprint: str
    block_ids: _containers.RepeatedScalarFieldContainer[bytes]
    layer_start: int
    layer_stop: int
    def __init__(self, model_fingerprint: _Optional[str] = ..., block_ids: _Optional[_Iterable[bytes]] = ..., layer_start: _Optional[int] = ..., layer_stop: _Optional[int] = ...) -> None: ...

class ReadChunk(_message.Message):
    __slots__ = ("block_id", "data", "header_size", "layer_start", "layer_stop", "num_layers", "tier")
    BLOCK_ID_FIELD_NUMBER: _ClassVar[int]
    DATA_FIELD_NUMBER: _ClassVar[int]
    HEADER_SIZE_FIELD_NUMBER: _ClassVar[int]
    LAYER_START_FIELD_NUMBER: _ClassVar[int]
    LAYER_STOP_FIELD_NUMBER: _ClassVar[int]
    NUM_LAYERS_FIELD_NUMBER: _ClassVar[int]
    TIER_FIELD_NUMBER: _ClassVar[int]
    block_id: bytes
    data: bytes
    header_size: int
    layer_start: int
    layer_stop: int
    num_layers: int
    tier: Tier
    def __init__(self, block_id: _Optional[bytes] = ..., data: _Optional[bytes] = ..., header_size: _Optional[int] = ..., layer_start: _Optional[int] = ..., layer_stop: _Optional[int] = ..., num_layers: _Optional[int] = ..., tier: _Optional[_Union[Tier, str]] = ...) -> None: ...

class LookupRequest(_message.Message):
    __slots__ = ("block_ids",)
    BLOCK_IDS_FIELD_NUMBER: _ClassVar[int]
    block_ids: _containers.RepeatedScalarFieldContainer[bytes]
    def __init__(self, block_ids: _Optional[_Iterable[bytes]] = ...) -> None: ...

class LookupResponse(_message.Message):
    __slots__ = ("prefix_blocks", "tiers")
    PREFIX_BLOCKS_FIELD_NUMBER: _ClassVar[int]
    TIERS_FIELD_NUMBER: _ClassVar[int]
    prefix_blocks: int
    tiers: _containers.RepeatedScalarFieldContainer[Tier]
    def __init__(self, prefix_blocks: _Optional[int] = ..., tiers: _Optional[_Iterable[_Union[Tier, str]]] = ...) -> None: ...

class PinRequest(_message.Message):
    __slots__ = ("block_ids", "ttl_s")
    BLOCK_IDS_FIELD_NUMBER: _ClassVar[int]
    TTL_S_FIELD_NUMBER: _ClassVar[int]
    block_ids: _containers.RepeatedScalarFieldContainer[bytes]
    ttl_s: float
    def __init__(self, block_ids: _Optional[_Iterable[bytes]] = ..., ttl_s: _Optional[float] = ...) -> None: ...

class PinResponse(_message.Message):
    __slots__ = ("pinned",)
    PINNED_FIELD_NUMBER: _ClassVar[int]
    pinned: int
    def __init__(self, pinned: _Optional[int] = ...) -> None: ...

class UnpinRequest(_message.Message):
    __slots__ = ("block_ids",)
    BLOCK_IDS_FIELD_NUMBER: _ClassVar[int]
    block_ids: _containers.RepeatedScalarFieldContainer[bytes]
    def __init__(self, block_ids: _Optional[_Iterable[bytes]] = ...) -> None: ...

class UnpinResponse(_message.Message):
    __slots__ = ("unpinned",)
    UNPINNED_FIELD_NUMBER: _ClassVar[int]
    unpinned: int
    def __init__(self, unpinned: _Optional[int] = ...) -> None: ...

class HintRequest(_message.Message):
    __slots__ = ("block_ids", "priority", "next_use_in_s")
    BLOCK_IDS_FIELD_NUMBER: _ClassVar[int]
    PRIORITY_FIELD_NUMBER: _ClassVar[int]
    NEXT_USE_IN_S_FIELD_NUMBER: _ClassVar[int]
    block_ids: _containers.RepeatedScalarFieldContainer[bytes]
    priority: int
    next_use_in_s: float
    def __init__(self, block_ids: _Optional[_Iterable[bytes]] = ..., priority: _Optional[int] = ..., next_use_in_s: _Optional[float] = ...) -> None: ...

class HintResponse(_message.Message):
    __slots__ = ("stored",)
    STORED_FIELD_NUMBER: _ClassVar[int]
    stored: int
    def __init__(self, stored: _Optional[int] = ...) -> None: ...

class DeleteRequest(_message.Message):
    __slots__ = ("block_ids",)
    BLOCK_IDS_FIELD_NUMBER: _ClassVar[int]
    block_ids: _containers.RepeatedScalarFieldContainer[bytes]
    def __init__(self, block_ids: _Optional[_Iterable[bytes]] = ...) -> None: ...

class DeleteResponse(_message.Message):
    __slots__ = ("deleted",)
    DELETED_FIELD_NUMBER: _ClassVar[int]
    deleted: int
    def __init__(self, deleted: _Optional[int] = ...) -> None: ...

class StatsRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class TierStats(_message.Message):
    __slots__ = ("tier", "blocks", "bytes", "budget_bytes", "hits", "misses", "evictions", "peak_bytes")
    TIER_FIELD_NUMBER: _ClassVar[int]
    BLOCKS_FIELD_NUMBER: _ClassVar[int]
    BYTES_FIELD_NUMBER: _ClassVar[int]
    BUDGET_BYTES_FIELD_NUMBER: _ClassVar[int]
    HITS_FIELD_NUMBER: _ClassVar[int]
    MISSES_FIELD_NUMBER: _ClassVar[int]
    EVICTIONS_FIELD_NUMBER: _ClassVar[int]
    PEAK_BYTES_FIELD_NUMBER: _ClassVar[int]
    tier: Tier
    blocks: int
    bytes: int
    budget_bytes: int
    hits: int
    misses: int
    evictions: int
    peak_bytes: int
    def __init__(self, tier: _Optional[_Union[Tier, str]] = ..., blocks: _Optional[int] = ..., bytes: _Optional[int] = ..., budget_bytes: _Optional[int] = ..., hits: _Optional[int] = ..., misses: _Optional[int] = ..., evictions: _Optional[int] = ..., peak_bytes: _Optional[int] = ...) -> None: ...

class StatsResponse(_message.Message):
    __slots__ = ("blocks", "bytes", "hits", "misses", "corrupt_dropped", "tiers", "reserved_bytes", "pinned_blocks", "read_bytes", "write_bytes", "read_bytes_per_s", "write_bytes_per_s")
    BLOCKS_FIELD_NUMBER: _ClassVar[int]
    BYTES_FIELD_NUMBER: _ClassVar[int]
    HITS_FIELD_NUMBER: _ClassVar[int]
    MISSES_FIELD_NUMBER: _ClassVar[int]
    CORRUPT_DROPPED_FIELD_NUMBER: _ClassVar[int]
    TIERS_FIELD_NUMBER: _ClassVar[int]
    RESERVED_BYTES_FIELD_NUMBER: _ClassVar[int]
    PINNED_BLOCKS_FIELD_NUMBER: _ClassVar[int]
    READ_BYTES_FIELD_NUMBER: _ClassVar[int]
    WRITE_BYTES_FIELD_NUMBER: _ClassVar[int]
    READ_BYTES_PER_S_FIELD_NUMBER: _ClassVar[int]
    WRITE_BYTES_PER_S_FIELD_NUMBER: _ClassVar[int]
    blocks: int
    bytes: int
    hits: int
    misses: int
    corrupt_dropped: int
    tiers: _containers.RepeatedCompositeFieldContainer[TierStats]
    reserved_bytes: int
    pinned_blocks: int
    read_bytes: int
    write_bytes: int
    read_bytes_per_s: float
    write_bytes_per_s: float
    def __init__(self, blocks: _Optional[int] = ..., bytes: _Optional[int] = ..., hits: _Optional[int] = ..., misses: _Optional[int] = ..., corrupt_dropped: _Optional[int] = ..., tiers: _Optional[_Iterable[_Union[TierStats, _Mapping]]] = ..., reserved_bytes: _Optional[int] = ..., pinned_blocks: _Optional[int] = ..., read_bytes: _Optional[int] = ..., write_bytes: _Optional[int] = ..., read_bytes_per_s: _Optional[float] = ..., write_bytes_per_s: _Optional[float] = ...) -> None: ...
