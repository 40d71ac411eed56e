"""The hand-written FabricChunk codec is byte-compatible with the generated protobuf code."""

from __future__ import annotations

import pytest

from agentserve.fabric.wire import decode_chunk, encode_chunk
from agentserve.v1 import fabric_pb2

pytestmark = pytest.mark.unit

HEADER = fabric_pb2.TransferHeader(
    transfer_id="t", path="A", src="kvstore", dst_nic="snic", total_bytes=1 << 33, sender_latency_ms=0.005
)


@pytest.mark.parametrize(
    "transfer, run, run_header, offset, data",
    [
        (HEADER, 0, b"ASKV-header", 0, b"x" * 300),
        (None, 7, b"", 1 << 20, bytes(range(256)) * 5000),
        (None, 0, b"", 0, b""),
        (HEADER, 2**32 - 1, b"h", 2**64 - 1, b"\x00"),
    ],
)
def test_encode_matches_protobuf_and_decodes_back(transfer, run, run_header, offset, data):
    message = fabric_pb2.FabricChunk(run=run, run_header=run_header, offset=offset, data=data)
    if transfer is not None:
        message.transfer.CopyFrom(transfer)
    wire = encode_chunk(transfer, run, run_header, offset, memoryview(data))
    assert wire == message.SerializeToString()
    chunk = decode_chunk(wire)
    assert (chunk.transfer, chunk.run, bytes(chunk.run_header), chunk.offset, bytes(chunk.data)) == (
        transfer,
        run,
        run_header,
        offset,
        data,
    )


def test_decode_reads_protobuf_output_and_skips_unknown_fields():
    wire = fabric_pb2.FabricChunk(run=3, data=b"kv").SerializeToString()
    unknown = b"\x30\x05" + b"\x3d\x00\x00\x00\x00" + b"\x41" + bytes(8)  # varint 6, fixed32 7, fixed64 8
    chunk = decode_chunk(unknown + wire)
    assert (chunk.transfer, chunk.run, bytes(chunk.data)) == (None, 3, b"kv")


@pytest.mark.parametrize(
    "wire, message",
    [
        (b"\x2a\x05ab", "truncated"),
        (b"\x10\xff", "malformed varint"),
        (b"\x2b", "unsupported wire type"),
        (b"\x12\x01a", "field 2 is length-delimited where a varint belongs"),  # run as bytes
        (b"\x2a\x00\x28\x01", "field 5 is a varint where bytes belong"),  # data, last as a varint
    ],
)
def test_malformed_chunks_are_value_errors(wire, message):
    with pytest.raises(ValueError, match=message):
        decode_chunk(wire)
