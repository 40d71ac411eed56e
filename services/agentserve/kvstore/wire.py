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

from agentserve.common.protowire import LEN, VARINT, bytes_field, parse_fields, varint_field, write_key, write_varint
from agentserve.kvstore.types import BlockRead, Tier
from agentserve.v1 import kvstore_pb2, kvstore_pb2_grpc

SERVICE = "agentserve.v1.KVStore"
READ_METHOD = f"/{SERVICE}/Read"
GET_METHOD = f"/{SERVICE}/Get"


def encode_read_chunk(read: BlockRead) -> bytes:
    """`ReadChunk` wire bytes of a read."""
    head = bytearray()
    _bytes_field(head, 1, read.block_id)
    for number, value in (
        (3, read.header_size),
        (4, read.layers.start),
        (5, read.layers.stop),
        (6, read.num_layers),
        (7, int(read.tier)),
    ):
        if value:
            write_key(head, number, VARINT)
            write_varint(head, value)
    write_key(head, 2, LEN)
    write_varint(head, len(read.data))
    return bytes(head) + read.data


def decode_read_chunk(buf: bytes) -> BlockRead:
    """The read in `ReadChunk` wire bytes; its `data` is a read-only view of `buf` (no copy)."""
    what = "ReadChunk"
    fields = parse_fields(memoryview(buf), what)
    return BlockRead(
        block_id=bytes(bytes_field(fields, 1, what)),
        data=bytes_field(fields, 2, what),
        header_size=varint_field(fields, 3, what),
        layers=range(varint_field(fields, 4, what), varint_field(fields, 5, what)),
        num_layers=varint_field(fields, 6, what),
        tier=Tier(varint_field(fields, 7, what)),
    )


def encode_kv_block(read: BlockRead) -> bytes:
    """`KVBlock` wire bytes of a whole-block read."""
    head = bytearray()
    _bytes_field(head, 1, read.block_id)
    write_key(head, 2, LEN)
    write_varint(head, len(read.data))
    return bytes(head) + read.data


def decode_kv_block(buf: bytes) -> tuple[bytes, bytes]:
    what = "KVBlock"
    fields = parse_fields(memoryview(buf), what)
    return bytes(bytes_field(fields, 1, what)), bytes(bytes_field(fields, 2, what))


def add_to_server(servicer: kvstore_pb2_grpc.KVStoreServicer, server: grpc.aio.Server) -> None:
    """The generated registration, with Read and Get encoded by this module."""
    capture = _Capture()
    kvstore_pb2_grpc.add_KVStoreServicer_to_server(servicer, capture)
    handlers = dict(capture.handlers)
    handlers["Read"] = grpc.unary_stream_rpc_method_handler(
        servicer.Read, request_deserializer=kvstore_pb2.ReadRequest.FromString, response_serializer=encode_read_chunk
    )
    handlers["Get"] = grpc.unary_stream_rpc_method_handler(
        servicer.Get, request_deserializer=kvstore_pb2.GetRequest.FromString, response_serializer=encode_kv_block
    )
    server.add_generic_rpc_handlers((grpc.method_handlers_generic_handler(SERVICE, handlers),))
    server.add_registered_method_handlers(SERVICE, handlers)


class _Capture:
    """Stands in for a server to collect the generated handlers instead of registering them."""

    handlers: dict

    def add_generic_rpc_handlers(self, handlers: object) -> None:
        pass

    def add_registered_method_handlers(self, name: str, handlers: dict) -> None:
        self.handlers = handlers


def _bytes_field(out: bytearray, number: int, value: bytes) -> None:
    if value:
        write_key(out, number, LEN)
        write_varint(out, len(value))
        out += value
