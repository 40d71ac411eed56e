"""A relayed run's layers reach the LayerStream as they complete, before the run is whole."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
import torch

from agentserve.engine.layer_stream import LayerStream
from agentserve.engine_service.layer_loads import RunLayers, layers_per_read
from agentserve.fabric.chunks import RunAssembler, split_run
from agentserve.kv.block_format import serialize_blocks
from agentserve.kv.block_header import CorruptBlockError

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
