"""`FabricChunk` on the wire without copying KV bytes through protobuf objects.

Python protobuf copies a chunk's payload into the message and again when serializing, and the
receiver copies it out again: at gigabits per second that is most of a core. `encode_chunk`
writes the same bytes a `FabricChunk(...).SerializeToString()` would (fields in number order,
proto3 defaults omitted) with one copy; `decode_chunk` reads any serialized `FabricChunk` and hands
back the payload as a view of the received buffer. Unit tests hold both to the generated code.
"""

from __future__ import annotations

from dataclasses import dataclass

from agentserve.v1 import fabric_pb2

_LEN, _VARINT = 2, 0
_TRANSFER, _RUN, _RUN_HEADER, _OFFSET, _DATA = 1, 2, 3, 4, 5


@dataclass(frozen=True)
class Chunk:
    """A decoded `FabricChunk`; `data` and `run_header` are views of the received message."""

    transfer: fabric_pb2.TransferHeader | None
    run: int
    run_header: memoryview
    offset: int
    data: memoryview


def encode_chunk(transfer: fabric_pb2.TransferHeader | None, run: int, run_header: bytes, offset: int,
                 data: bytes | memoryview) -> bytes:
    """Serialized `FabricChunk` (byte-identical to the generated code's output)."""
    parts: list[bytes | memoryview] = []
    if transfer is not None:
        _field(parts, _TRANSFER, transfer.SerializeToString())
    if run:
        parts += [_tag(_RUN, _VARINT), _varint(run)]
    if run_header:
        _field(parts, _RUN_HEADER, run_header)
    if offset:
        parts += [_tag(_OFFSET, _VARINT), _varint(offset)]
    if len(data):
        _field(parts, _DATA, data)
    return b"".join(parts)


def decode_chunk(buf: bytes) -> Chunk:
    """Parse a serialized `FabricChunk`; unknown fields are skipped. Malformed input: ValueError."""
    view = memoryview(buf)
    fields: dict[int, object] = {}
    pos = 0
    while pos < len(view):
        key, pos = _read_varint(view, pos)
        number, wire_type = key >> 3, key & 7
        if wire_type == _VARINT:
            fields[number], pos = _read_varint(view, pos)
        elif wire_type == _LEN:
            length, pos = _read_varint(view, pos)
            if pos + length > len(view):
                raise ValueError("FabricChunk truncated")
            fields[number], pos = view[pos:pos + length], pos + length
        elif wire_type in (1, 5):  # fixed64 / fixed32 of a field this reader does not know
            pos += 8 if wire_type == 1 else 4
        else:
            raise ValueError(f"FabricChunk: unsupported wire type {wire_type}")
    transfer = None
    if _TRANSFER in fields:
        transfer = fabric_pb2.TransferHeader.FromString(bytes(fields[_TRANSFER]))
    empty = memoryview(b"")
    return Chunk(transfer=transfer, run=int(fields.get(_RUN, 0)), run_header=fields.get(_RUN_HEADER, empty),
                 offset=int(fields.get(_OFFSET, 0)), data=fields.get(_DATA, empty))


def _field(parts: list, number: int, value: bytes | memoryview) -> None:
    parts += [_tag(number, _LEN), _varint(len(value)), value]


def _tag(number: int, wire_type: int) -> bytes:
    return _varint(number << 3 | wire_type)


def _varint(value: int) -> bytes:
    out = bytearray()
    while True:
        low, value = value & 0x7F, value >> 7
        if not value:
            out.append(low)
            return bytes(out)
        out.append(low | 0x80)


def _read_varint(view: memoryview, pos: int) -> tuple[int, int]:
    value = shift = 0
    while True:
        if pos >= len(view) or shift > 63:
            raise ValueError("FabricChunk: malformed varint")
        byte = view[pos]
        value |= (byte & 0x7F) << shift
        pos += 1
        if not byte & 0x80:
            return value, pos
        shift += 7
