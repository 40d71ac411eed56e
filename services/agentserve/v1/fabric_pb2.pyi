from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class TransferHeader(_message.Message):
    __slots__ = ("transfer_id", "path", "src", "dst_nic", "total_bytes", "sender_latency_ms")
    TRANSFER_ID_FIELD_NUMBER: _ClassVar[int]
    PATH_FIELD_NUMBER: _ClassVar[int]
    SRC_FIELD_NUMBER: _ClassVar[int]
    DST_NIC_FIELD_NUMBER: _ClassVar[int]
    TOTAL_BYTES_FIELD_NUMBER: _ClassVar[int]
    SENDER_LATENCY_MS_FIELD_NUMBER: _ClassVar[int]
    transfer_id: str
    path: str
    src: str
    dst_nic: str
    total_bytes: int
    sender_latency_ms: float
    def __init__(self, transfer_id: _Optional[str] = ..., path: _Optional[str] = ..., src: _Optional[str] = ..., dst_nic: _Optional[str] = ..., total_bytes: _Optional[int] = ..., sender_latency_ms: _Optional[float] = ...) -> None: ...

class FabricChunk(_message.Message):
    __slots__ = ("transfer", "run", "run_header", "offset", "data")
    TRANSFER_FIELD_NUMBER: _ClassVar[int]
    RUN_FIELD_NUMBER: _ClassVar[int]
    RUN_HEADER_FIELD_NUMBER: _ClassVar[int]
    OFFSET_FIELD_NUMBER: _ClassVar[int]
    DATA_FIELD_NUMBER: _ClassVar[int]
    transfer: TransferHeader
    run: int
    run_header: bytes
    offset: int
    data: bytes
    def __init__(self, transfer: _Optional[_Union[TransferHeader, _Mapping]] = ..., run: _Optional[int] = ..., run_header: _Optional[bytes] = ..., offset: _Optional[int] = ..., data: _Optional[bytes] = ...) -> None: ...

class TransferSummary(_message.Message):
    __slots__ = ("bytes", "chunks", "runs", "elapsed_s", "queue_wait_s", "achieved_gbps")
    BYTES_FIELD_NUMBER: _ClassVar[int]
    CHUNKS_FIELD_NUMBER: _ClassVar[int]
    RUNS_FIELD_NUMBER: _ClassVar[int]
    ELAPSED_S_FIELD_NUMBER: _ClassVar[int]
    QUEUE_WAIT_S_FIELD_NUMBER: _ClassVar[int]
    ACHIEVED_GBPS_FIELD_NUMBER: _ClassVar[int]
    bytes: int
    chunks: int
    runs: int
    elapsed_s: float
    queue_wait_s: float
    achieved_gbps: float
    def __init__(self, bytes: _Optional[int] = ..., chunks: _Optional[int] = ..., runs: _Optional[int] = ..., elapsed_s: _Optional[float] = ..., queue_wait_s: _Optional[float] = ..., achieved_gbps: _Optional[float] = ...) -> None: ...

class NICStatus(_message.Message):
    __slots__ = ("name", "configured_gbps", "queue_bytes", "active_transfers", "bytes_total")
    NAME_FIELD_NUMBER: _ClassVar[int]
    CONFIGURED_GBPS_FIELD_NUMBER: _ClassVar[int]
    QUEUE_BYTES_FIELD_NUMBER: _ClassVar[int]
    ACTIVE_TRANSFERS_FIELD_NUMBER: _ClassVar[int]
    BYTES_TOTAL_FIELD_NUMBER: _ClassVar[int]
    name: str
    configured_gbps: float
    queue_bytes: int
    active_transfers: int
    bytes_total: int
    def __init__(self, name: _Optional[str] = ..., configured_gbps: _Optional[float] = ..., queue_bytes: _Optional[int] = ..., active_transfers: _Optional[int] = ..., bytes_total: _Optional[int] = ...) -> None: ...
