"""`FabricChunk` on the wire without copying KV bytes through protobuf objects.

Python protobuf copies a chunk's payload into the message and again when serializing, and the
receiver copies it out again: at gigabits per second that is most of a core. `encode_chunk`
writes the same bytes a `FabricChunk(...).SerializeToString()` would (fields in number order,
proto3 defaults omitted) with one copy; `decode_chunk` reads any serialized `FabricChunk` and hands
back the payload as a view of the received buffer. Unit tests hold both to the generated code.
"""

from __future__ import annotations

from dataclasses import dataclass

from agentserve.common.protowire import LEN, VARINT, bytes_field, parse_fields, varint, varint_field
from agentserve.v1 import fabric_pb2

_TRANSFER, _RUN, _RUN_HEADER, _OFFSET, _DATA = 1, 2, 3, 4, 5


@dataclass(frozen=True)
class Chunk:
    """A decoded `FabricChunk`; `data` and `run_header` are views of the received message."""

    transfer: fabric_pb2.TransferHeader | None
    run: int
    run_header: memoryview
    offset: int
    data: memoryview


def encode_chunk(
    transfer: fabric_pb2.TransferHeader | None, run: int, run_header: bytes, offset: int, data: bytes | memoryview
) -> bytes:
    """Serialized `FabricChunk` (byte-identical to the generated code's output)."""
    parts: list[bytes | memoryview] = []
    if transfer is not None:
        _field(parts, _TRANSFER, transfer.SerializeToString())
    if run:
        parts += [_tag(_RUN, VARINT), varint(run)]
    if run_header:
        _field(parts, _RUN_HEADER, run_header)
    if offset:
        parts += [_tag(_OFFSET, VARINT), varint(offset)]
    if len(data):
        _field(parts, _DATA, data)
    return b"".join(parts)


def decode_chunk(buf: bytes) -> Chunk:
    """Parse a serialized `FabricChunk`; unknown fields are skipped. Malformed input: ValueError."""
    what = "FabricChunk"
    fields = parse_fields(memoryview(buf), what)
    transfer = None
    if _TRANSFER in fields:
        transfer = fabric_pb2.TransferHeader.FromString(bytes(bytes_field(fields, _TRANSFER, what)))
    return Chunk(
        transfer=transfer,
        run=varint_field(fields, _RUN, what),
        run_header=bytes_field(fields, _RUN_HEADER, what),
        offset=varint_field(fields, _OFFSET, what),
        data=bytes_field(fields, _DATA, what),
    )


def _field(parts: list, number: int, value: bytes | memoryview) -> None:
    parts += [_tag(number, LEN), varint(len(value)), value]


def _tag(number: int, wire_type: int) -> bytes:
    return varint(number << 3 | wire_type)
