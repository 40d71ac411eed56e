import pytest

from agentserve.kvstore import wire
from agentserve.kvstore.types import BlockRead, Tier
from agentserve.v1 import common_pb2, kvstore_pb2

pytestmark = pytest.mark.unit


@pytest.mark.parametrize(
    "read",
    [
        BlockRead(b"\x01" * 16, b"header" + b"\xff" * 300, 6, range(0, 32), 32, Tier.SSD),
        BlockRead(b"\x02" * 16, b"h" * 70000, 64, range(5, 9), 80, Tier.DRAM),
        BlockRead(b"\x03" * 16, b"", 0, range(0, 0), 0, Tier.NONE),  # every small field at its default
    ],
)
def test_read_chunks_match_protobuf_both_ways(read):
    message = kvstore_pb2.ReadChunk.FromString(wire.encode_read_chunk(read))
    assert (
        message.block_id,
        message.data,
        message.header_size,
        message.layer_start,
        message.layer_stop,
        message.num_layers,
        message.tier,
    ) == (
        read.block_id,
        read.data,
        read.header_size,
        read.layers.start,
        read.layers.stop,
        read.num_layers,
        int(read.tier),
    )
    decoded = wire.decode_read_chunk(message.SerializeToString())
    assert decoded == read and isinstance(decoded.data, memoryview)  # a view of the message, not a copy
    assert type(decoded.block_id) is bytes


def test_kv_blocks_match_protobuf_both_ways():
    read = BlockRead(b"\x07" * 16, bytes(range(256)) * 50, 64, range(0, 3), 3, Tier.SSD)
    message = common_pb2.KVBlock.FromString(wire.encode_kv_block(read))
    assert (message.block_id, message.data) == (read.block_id, read.data)
    assert wire.decode_kv_block(message.SerializeToString()) == (read.block_id, read.data)


def test_unknown_fields_are_skipped_and_truncation_is_an_error():
    message = kvstore_pb2.StatsResponse(reserved_bytes=3, read_bytes_per_s=1.5).SerializeToString()  # varint, fixed64
    assert wire.decode_kv_block(message) == (b"", b"")
    with pytest.raises(ValueError, match="past the end"):
        wire.decode_kv_block(common_pb2.KVBlock(block_id=b"x" * 16, data=b"abc").SerializeToString()[:-1])
