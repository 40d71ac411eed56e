"""Loads for a layerwise prefill: store hits streamed into a `LayerStream` by layer, not imported.

Path A reads the store layer-major (`store_by_layer`): one read of layer l of every block, then
layer l+1, so layer 0 of the whole prefix is in hand after ~1/num_layers of the bytes and the
forward starts while the rest arrives. Path B (`relay_by_layer`) takes what the decode engine sends:
runs of `RELAY_RUN_BLOCKS` blocks, layer-major within a run, so a layer is complete only when the
last run's part of it has arrived: the overlap is the last run's layers, not the whole prefix.

Neither touches the engine thread, which may be waiting on the stream.
"""

from __future__ import annotations

from collections.abc import Sequence

from agentserve.common.telemetry import kv_transfer
from agentserve.engine.layer_stream import LayerStream
from agentserve.engine_service.kv_moves import KVMover
from agentserve.kv.block_format import decode_layers, payload_range, read_header
from agentserve.kv.block_header import BlockHeader, CorruptBlockError


async def store_by_layer(mover: KVMover, ids: Sequence[bytes], stream: LayerStream, first: int) -> int:
    """Path A into `stream` (blocks `ids` at index `first` on); returns the blocks delivered whole.

    A block missing from the store ends the run there: later layers are read for the blocks before it."""
    count = len(ids)
    if not count:
        return 0
    with kv_transfer("A", "snic", mover.kvstore_address, mover.engine_id, mover.num_layers, mover.snic.gbps) as record:
        async with mover.snic.transfer(count * mover.charge.per_block) as transfer:
            for layer in range(mover.num_layers):
                got = 0
                async for read in mover.kvstore.read(mover.fingerprint, list(ids[:count]), range(layer, layer + 1)):
                    charged = mover.charge.blocks(len(read.data), layers=len(read.layers))
                    await transfer.pace(charged)
                    record.add(charged, blocks=0)
                    view = memoryview(read.data)
                    kv = decode_layers(
                        read_header(view), view[read.header_size :], read.layers, stream.dtype, mover.fingerprint
                    )
                    stream.put(first + got, read.layers, kv.k, kv.v)
                    got += 1
                count = got
            record.blocks = count
        record.queue_wait_s = transfer.queue_wait_s
    return count


class RunLayers:
    """One relayed run's layers into `stream` as they complete (`RunAssembler.layers_done`)."""

    def __init__(self, stream: LayerStream, first: int, expected: Sequence[bytes]) -> None:
        self.stream, self.first, self.expected = stream, first, list(expected)
        self.delivered = 0  # layers of this run already put

    def check(self, header: BlockHeader) -> None:
        if list(header.block_ids) != self.expected[: header.num_blocks]:
            raise CorruptBlockError("relayed run holds other blocks than the ones asked for, or out of order")

    def deliver(self, header: BlockHeader, buffer: bytearray, layers_done: int) -> None:
        if layers_done <= self.delivered:
            return
        layers = range(self.delivered, layers_done)
        offset, length = payload_range(header, layers.start, layers.stop)
        kv = decode_layers(header, memoryview(buffer)[offset : offset + length], layers, self.stream.dtype)
        self.stream.put(self.first, layers, kv.k, kv.v)
        self.delivered = layers_done
