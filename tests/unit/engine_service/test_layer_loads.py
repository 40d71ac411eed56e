"""Loads into a LayerStream: a relayed run's layers as they complete, before the run is whole; a
store read's layers as the storage NIC lets each through, even when one read carries them all."""

from __future__ import annotations

import asyncio
from contextlib import asynccontextmanager
from types import SimpleNamespace

import pytest
import torch

from agentserve.engine.layer_stream import LayerStream
from agentserve.engine_service.kv_charge import KVCharge
from agentserve.engine_service.layer_loads import RunLayers, layers_per_read, store_by_layer
from agentserve.fabric.chunks import RunAssembler, split_run
from agentserve.kv.block_format import header_size, serialize_blocks
from agentserve.kv.block_header import CorruptBlockError
from agentserve.kvstore.types import BlockRead, Tier

pytestmark = pytest.mark.unit

LAYERS, BLOCKS, SHAPE = 4, 3, (16, 2, 8)
IDS = [bytes([i]) * 16 for i in range(BLOCKS)]


def _run(ids=IDS) -> tuple[torch.Tensor, torch.Tensor, bytearray]:
    k = torch.randn(LAYERS, len(ids), *SHAPE)
    v = torch.randn(LAYERS, len(ids), *SHAPE)
    return k, v, serialize_blocks(k, v, block_ids=ids, fingerprint="fp")


def test_layers_are_delivered_one_chunk_at_a_time():
    k, v, run = _run()
    stream = LayerStream(LAYERS, BLOCKS + 1, SHAPE, torch.float32)
    chunks = split_run(run, max_layers=1)
    assembler, layers = RunAssembler(chunks[0].header), RunLayers(stream, 1, IDS)
    layers.check(assembler.header)
    ready = []
    for chunk in chunks:
        layers.deliver(assembler.header, assembler.buffer, assembler.add(chunk.offset, chunk.data))
        ready.append(layers.delivered)
    assert ready == [1, 2, 3, 4]  # one more layer per chunk
    assert torch.equal(stream.k[:, 1:], k) and torch.equal(stream.v[:, 1:], v)
    assert not stream.started()  # block 0 of the stream is another run's, still missing


def test_a_run_of_other_blocks_is_refused():
    _, _, run = _run(list(reversed(IDS)))
    stream = LayerStream(LAYERS, BLOCKS, SHAPE, torch.float32)
    assembler = RunAssembler(split_run(run)[0].header)
    with pytest.raises(CorruptBlockError, match="relayed run holds other blocks than the ones asked for"):
        RunLayers(stream, 0, IDS).check(assembler.header)


@pytest.mark.parametrize(
    "layer_kb, layers, min_kb, expected",
    [(16, 4, 64, 4), (16, 4, 0, 1), (64, 32, 64, 1), (24, 32, 64, 3), (1, 4, 1024, 4)],
)
def test_a_read_carries_whole_layers_of_at_least_the_minimum(layer_kb, layers, min_kb, expected):
    mover = SimpleNamespace(block_bytes=layer_kb * layers << 10, num_layers=layers)
    assert layers_per_read(mover, min_kb << 10) == expected  # type: ignore[arg-type]


class _Store:
    """Whole stored blocks, read as the KV store serves them (every layer: the read's `layers`)."""

    def __init__(self, blocks: dict[bytes, bytearray]) -> None:
        self.blocks = blocks

    async def read(self, fingerprint, block_ids, layers):
        assert layers == range(LAYERS)  # small layers: one read carries them all
        for block_id in block_ids:
            if block_id not in self.blocks:
                return
            data = self.blocks[block_id]
            yield BlockRead(block_id, data, header_size(data), layers, LAYERS, Tier.DRAM)


class _SNIC:
    """Records, at every paced share, which layers of the stream were ready before it."""

    gbps = 0.0

    def __init__(self, stream: LayerStream) -> None:
        self.stream, self.paced, self.ready_before = stream, [], []

    @asynccontextmanager
    async def transfer(self, expected_bytes):
        nic = self

        class _Transfer:
            queue_wait_s = 0.0

            async def pace(self, nbytes):
                nic.ready_before.append(sum(nic.stream._ready))
                nic.paced.append(nbytes)

        yield _Transfer()


def test_one_read_of_every_layer_is_put_layer_by_layer_as_the_nic_paces_it():
    k, v = torch.randn(LAYERS, BLOCKS, *SHAPE), torch.randn(LAYERS, BLOCKS, *SHAPE)
    stored = {i: serialize_blocks(k[:, n : n + 1], v[:, n : n + 1], [i], "fp") for n, i in enumerate(IDS[:2])}
    stream = LayerStream(LAYERS, BLOCKS, SHAPE, torch.float32)
    declared = 1000 * LAYERS  # an emulated block's target bytes, 1000 a layer
    mover = SimpleNamespace(
        num_layers=LAYERS,
        kvstore_address="store",
        engine_id="prefill-0",
        fingerprint="fp",
        kvstore=_Store(stored),
        charge=KVCharge(len(stored[IDS[0]]), LAYERS, declared),
        snic=_SNIC(stream),
    )
    # The third block is not stored: the load ends before it, with every layer of the two before.
    delivered = asyncio.run(store_by_layer(mover, IDS, stream, 0, LAYERS))  # type: ignore[arg-type]
    assert delivered == 2
    assert mover.snic.paced == [2 * 1000] * LAYERS  # one layer of both blocks at a time
    assert mover.snic.ready_before == [0, 0, 0, 0]  # the stream is short a block: no layer completes
    assert torch.equal(stream.k[:, :2], k[:, :2]) and torch.equal(stream.v[:, :2], v[:, :2])
    assert stream._have[:, :2].all() and not stream._have[:, 2].any()


def test_layer_zero_is_ready_after_the_first_layers_share_of_the_nic():
    k, v = torch.randn(LAYERS, BLOCKS, *SHAPE), torch.randn(LAYERS, BLOCKS, *SHAPE)
    stored = {i: serialize_blocks(k[:, n : n + 1], v[:, n : n + 1], [i], "fp") for n, i in enumerate(IDS)}
    stream = LayerStream(LAYERS, BLOCKS, SHAPE, torch.float32)
    mover = SimpleNamespace(
        num_layers=LAYERS,
        kvstore_address="store",
        engine_id="prefill-0",
        fingerprint="fp",
        kvstore=_Store(stored),
        charge=KVCharge(len(stored[IDS[0]]), LAYERS, 1000 * LAYERS),
        snic=_SNIC(stream),
    )
    assert asyncio.run(store_by_layer(mover, IDS, stream, 0, LAYERS)) == BLOCKS  # type: ignore[arg-type]
    # Before each layer's share was paced, exactly the layers before it were in hand.
    assert mover.snic.ready_before == [0, 1, 2, 3] and stream.complete
    assert torch.equal(stream.k, k) and torch.equal(stream.v, v)
