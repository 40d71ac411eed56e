"""split_run / RunAssembler: layer-boundary chunks that reassemble byte for byte, layer by layer."""

from __future__ import annotations

import pytest
import torch

from agentserve.fabric.chunks import RunAssembler, split_run
from agentserve.kv.block_format import deserialize_blocks, serialize_blocks
from agentserve.kv.block_header import CorruptBlockError, read_header

pytestmark = pytest.mark.unit

SHAPE = (4, 3, 16, 2, 8)  # layers, blocks, block_size, kv heads, head_dim: 3 KiB per layer


def make_run(shape=SHAPE) -> bytes:
    gen = torch.Generator().manual_seed(0)
    k, v = torch.randn(shape, generator=gen), torch.randn(shape, generator=gen)
    return bytes(serialize_blocks(k, v, block_ids=[bytes([i]) * 16 for i in range(shape[1])], fingerprint="fp"))


def layer_bytes(run: bytes) -> int:
    header = read_header(run)
    return header.layers[1].offset - header.layers[0].offset


def reassemble(chunks) -> tuple[bytearray, list[int]]:
    assembler = RunAssembler(chunks[0].header)
    done = [assembler.add(c.offset, c.data) for c in chunks]
    return assembler.buffer, done


def test_chunks_cut_at_layer_boundaries_and_reassemble_exactly():
    run = make_run()
    chunks = split_run(run, max_chunk_bytes=2 * layer_bytes(run))
    assert [c.layers_done for c in chunks] == [2, 4]
    assert [bool(c.header) for c in chunks] == [True, False]
    buffer, done = reassemble(chunks)
    assert bytes(buffer) == run
    assert done == [2, 4]


def test_one_layer_per_chunk_for_layerwise_loads():
    run = make_run()
    chunks = split_run(run, max_chunk_bytes=1 << 20, max_layers=1)
    buffer, done = reassemble(chunks)
    assert (done, bytes(buffer)) == ([1, 2, 3, 4], run)


def test_layers_are_usable_before_the_run_completes():
    run = make_run()
    chunks = split_run(run, max_chunk_bytes=1 << 20, max_layers=1)
    assembler = RunAssembler(chunks[0].header)
    assembler.add(chunks[0].offset, chunks[0].data)
    layer0 = deserialize_blocks(assembler.buffer, layers=range(0, 1))
    assert torch.equal(layer0.k, deserialize_blocks(run, layers=range(0, 1)).k)
    assert not assembler.complete


def test_a_layer_larger_than_a_chunk_is_cut_within_itself():
    run = make_run()
    chunks = split_run(run, max_chunk_bytes=1000)
    assert max(len(c.data) for c in chunks) <= 1000
    assert sum(c.nbytes for c in chunks) == len(run)
    buffer, done = reassemble(chunks)
    assert bytes(buffer) == run
    assert sorted(set(done)) == [0, 1, 2, 3, 4] and done == sorted(done)


def test_whole_run_in_one_chunk_when_it_fits():
    run = make_run()
    (chunk,) = split_run(run, max_chunk_bytes=len(run))
    assert (chunk.layers_done, chunk.nbytes) == (4, len(run))


def test_corruption_in_transit_names_the_layer():
    run = make_run()
    chunks = split_run(run, max_chunk_bytes=1 << 20, max_layers=1)
    assembler = RunAssembler(chunks[0].header)
    assembler.add(chunks[0].offset, chunks[0].data)
    bad = bytearray(chunks[1].data)
    bad[10] ^= 0xFF
    with pytest.raises(CorruptBlockError, match="layer 1 checksum") as err:
        assembler.add(chunks[1].offset, bad)
    assert err.value.layer == 1


def test_out_of_order_chunk_is_rejected():
    run = make_run()
    chunks = split_run(run, max_chunk_bytes=1 << 20, max_layers=1)
    assembler = RunAssembler(chunks[0].header)
    with pytest.raises(CorruptBlockError, match="expected the next one"):
        assembler.add(chunks[1].offset, chunks[1].data)


def test_truncated_run_and_bad_arguments():
    run = make_run()
    with pytest.raises(CorruptBlockError, match="truncated"):
        split_run(run[:-1])
    with pytest.raises(ValueError, match="max_chunk_bytes"):
        split_run(run, max_chunk_bytes=0)
    with pytest.raises(ValueError, match="max_layers"):
        split_run(run, max_layers=0)
