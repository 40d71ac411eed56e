"""Hand-rolled protobuf encoding of the two messages that carry KV bytes: `ReadChunk` and `KVBlock`.

Building a protobuf message and serializing it copies the payload twice, and parsing it then
reading `.data` twice more; for megabyte blocks those copies cost as much as reading the block
from disk. These functions write and read the same wire format (any protobuf client still parses
it) with one copy each way: the small fields first, the payload last, concatenated once.
`add_to_server` registers the generated KVStore handlers with these serializers for Read and Get,
whose servicer methods therefore yield `BlockRead`s.
"""

from __future__ import annotations

import grpc

from agentserve.kvstore.types import BlockRead, Tier
from agentserve.v1 import kvstore_pb2, kvstore_pb2_grpc

SERVICE = "agentserve.v1.KVStore"
READ_METHOD = f"/{SERVICE}/Read"
GET_METHOD = f"/{SERVICE}/Get"

_LEN, _VARINT = 2, 0


def encode_read_chunk(read: BlockRead) -> bytes:
    """`ReadChunk` wire bytes of a read."""
    head = bytearray()
    _bytes_field(head, 1, read.block_id)
    for number, value in ((3, read.header_size), (4, read.layers.start), (5, read.layers.stop),
                          (6, read.num_layers), (7, int(read.tier))):
        if value:
            _key(head, number, _VARINT)
            _varint(head, value)
    _key(head, 2, _LEN)
    _varint(head, len(read.data))
    return bytes(head) + read.data


def decode_read_chunk(buf: bytes) -> BlockRead:
    fields = _parse(buf)
    data = fields.get(2, b"")
    return BlockRead(block_id=fields.get(1, b""), data=data, header_size=fields.get(3, 0),
                     layers=range(fields.get(4, 0), fields.get(5, 0)), num_layers=fields.get(6, 0),
                     tier=Tier(fields.get(7, 0)))


def encode_kv_block(read: BlockRead) -> bytes:
    """`KVBlock` wire bytes of a whole-block read."""
    head = bytearray()
    _bytes_field(head, 1, read.block_id)
    _key(head, 2, _LEN)
    _varint(head, len(read.data))
    return bytes(head) + read.data


def decode_kv_block(buf: bytes) -> tuple[bytes, bytes]:
    fields = _parse(buf)
    return fields.get(1, b""), fields.get(2, b"")


def add_to_server(servicer: kvstore_pb2_grpc.KVStoreServicer, server: grpc.aio.Server) -> None:
    """The generated registration, with Read and Get encoded by this module."""
    capture = _Capture()
    kvstore_pb2_grpc.add_KVStoreServicer_to_server(servicer, capture)
    handlers = dict(capture.handlers)
    handlers["Read"] = grpc.unary_stream_rpc_method_handler(
        servicer.Read, request_deserializer=kvstore_pb2.ReadRequest.FromString, response_serializer=encode_read_chunk)
    handlers["Get"] = grpc.unary_stream_rpc_method_handler(
        servicer.Get, request_deserializer=kvstore_pb2.GetRequest.FromString, response_serializer=encode_kv_block)
    server.add_generic_rpc_handlers((grpc.method_handlers_generic_handler(SERVICE, handlers),))
    server.add_registered_method_handlers(SERVICE, handlers)


class _Capture:
    """Stands in for a server to collect the generated handlers instead of registering them."""

    handlers: dict

    def add_generic_rpc_handlers(self, handlers) -> None:
        pass

    def add_registered_method_handlers(self, name: str, handlers: dict) -> None:
        self.handlers = handlers


def _key(out: bytearray, number: int, wire_type: int) -> None:
    _varint(out, number << 3 | wire_type)


def _varint(out: bytearray, value: int) -> None:
    while value > 0x7F:
        out.append(value & 0x7F | 0x80)
        value >>= 7
    out.append(value)


def _bytes_field(out: bytearray, number: int, value: bytes) -> None:
    if value:
        _key(out, number, _LEN)
        _varint(out, len(value))
        out += value


def _parse(buf: bytes) -> dict[int, int | bytes]:
    """Field number -> last value, for varint and length-delimited fields; others are skipped."""
    fields: dict[int, int | bytes] = {}
    pos, end = 0, len(buf)
    while pos < end:
        key, pos = _read_varint(buf, pos)
        number, wire_type = key >> 3, key & 7
        if wire_type == _VARINT:
            fields[number], pos = _read_varint(buf, pos)
        elif wire_type == _LEN:
            length, pos = _read_varint(buf, pos)
            if pos + length > end:
                raise ValueError("protobuf field runs past the end of the message")
            fields[number] = buf[pos:pos + length]
            pos += length
        elif wire_type in (1, 5):  # fixed64 / fixed32
            pos += 8 if wire_type == 1 else 4
        else:
            raise ValueError(f"unsupported protobuf wire type {wire_type}")
    return fields


def _read_varint(buf: bytes, pos: int) -> tuple[int, int]:
    value = shift = 0
    while True:
        if pos >= len(buf):
            raise ValueError("protobuf varint runs past the end of the message")
        byte = buf[pos]
        pos += 1
        value |= (byte & 0x7F) << shift
        if byte < 0x80:
            return value, pos
        shift += 7
