"""Loads for a layerwise prefill: store hits streamed into a `LayerStream` by layer, not imported.

Path A reads the store layer-major (`store_by_layer`): one read of layer l of every block, then
layer l+1, so layer 0 of the whole prefix is in hand after ~1/num_layers of the bytes and the
forward starts while the rest arrives. Layers too small to read alone are read in groups
(`layers_per_read`): with the tiny model (16 KB a layer of a block) or an emulated engine's stand-in
blocks (~1 KB a layer) that is whole blocks in one read. The read's bytes still pass the storage NIC
layer by layer, each layer put as soon as its share is paced, so the overlap is the NIC's, as on
the target, for the price of one store read per block.

Path B (`relay_by_layer`) takes what the decode engine sends: runs of `RELAY_RUN_BLOCKS` blocks,
layer-major within a run, so a layer is complete only when the last run's part of it has arrived:
the overlap is the last run's layers, not the whole prefix.

Neither touches the engine thread, which may be waiting on the stream.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from agentserve.common.telemetry import kv_transfer
from agentserve.engine.layer_stream import LayerStream
from agentserve.engine_service.kv_moves import KVMover
from agentserve.kv.block_format import decode_layers, payload_range, read_header
from agentserve.kv.block_header import BlockHeader, CorruptBlockError

# A store read costs a fixed overhead per block whatever its bytes (a fraction of a millisecond on a
# loopback store; `bench layerwise` measures it), so a layer range read per block should carry at least this
# much: below it, reading layer by layer multiplies that overhead by the layers for little overlap.
MIN_READ_BYTES = 64 << 10


def layers_per_read(mover: KVMover, min_read_bytes: int = MIN_READ_BYTES) -> int:
    """How many layers one read of a block carries: one, unless a layer is below `min_read_bytes`."""
    layer_bytes = mover.block_bytes // mover.num_layers
    return min(mover.num_layers, max(1, -(-min_read_bytes // layer_bytes)))


async def store_by_layer(mover: KVMover, ids: Sequence[bytes], stream: LayerStream, first: int, group: int) -> int:
    """Path A into `stream` (blocks `ids` at index `first` on), `group` layers per read; returns the
    blocks delivered whole.

    A read's bytes pass the storage NIC layer by layer, layer l of every block before layer l+1,
    and each layer is put as soon as its share is paced: layer 0 of the prefix is in hand after
    1/num_layers of the NIC time even when one read carries every layer (small layers, see
    `layers_per_read`), as a layer-major read of the target's KV would deliver it. A block missing
    from the store ends the run there: later layers are read for the blocks before it."""
    count = len(ids)
    if not count:
        return 0
    with kv_transfer("A", "snic", mover.kvstore_address, mover.engine_id, mover.num_layers, mover.snic.gbps) as record:
        async with mover.snic.transfer(count * mover.charge.per_block) as transfer:
            for start in range(0, mover.num_layers, group):
                layers = range(start, min(start + group, mover.num_layers))
                ks, vs, charged = [], [], 0
                async for read in mover.kvstore.read(mover.fingerprint, list(ids[:count]), layers):
                    charged += mover.charge.blocks(len(read.data), layers=len(read.layers))
                    view = memoryview(read.data)
                    kv = decode_layers(
                        read_header(view), view[read.header_size :], read.layers, stream.dtype, mover.fingerprint
                    )
                    ks.append(kv.k)
                    vs.append(kv.v)
                count = len(ks)
                if not count:
                    break
                k, v = torch.cat(ks, 1), torch.cat(vs, 1)
                for i, layer in enumerate(layers):  # a layer is ready once every block has it
                    share = charged * (i + 1) // len(layers) - charged * i // len(layers)
                    await transfer.pace(share)
                    record.add(share, blocks=0)
                    stream.put(first, range(layer, layer + 1), k[i : i + 1], v[i : i + 1])
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
