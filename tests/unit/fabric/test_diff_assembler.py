"""DiffAssembler: a diff run restored against the receiver's master layer by layer as it arrives."""

from __future__ import annotations

import asyncio

import pytest

from agentserve.fabric.chunks import DiffAssembler, Masters, RunAssembler, assembler_for, split_run
from agentserve.fabric.nic import EmulatedNIC
from agentserve.fabric.stream import PacedReceiver, paced_chunks, run_bytes
from agentserve.fabric.virtual_time import VirtualClock
from agentserve.fabric.wire import decode_chunk
from agentserve.kv.block_diff import restore_block
from agentserve.kv.block_format import serialize_blocks
from agentserve.kv.block_header import CorruptBlockError, read_header
from agentserve.kv.diff_layout import ROWS, XOR_DEFLATE
from agentserve.v1 import fabric_pb2
from tests.support.diff_blocks import FP, MASTER_POSITION, SHIFT, family

pytestmark = pytest.mark.unit


def full_sibling(sibling) -> bytes:
    """The sibling as the sender's engine holds it, serialized as a full block at its position."""
    return bytes(
        serialize_blocks(
            sibling.k.unsqueeze(1),
            sibling.v.unsqueeze(1),
            [sibling.block_id],
            FP,
            position=MASTER_POSITION + sibling.position_offset,
        )
    )


@pytest.mark.parametrize("codec", [ROWS, XOR_DEFLATE])
def test_each_layer_is_restored_as_its_chunk_lands_and_the_result_is_the_full_sibling(codec):
    fam = family(codec=codec)
    masters = Masters({fam.master_id: fam.master}.get, SHIFT)
    for sibling in fam.siblings:
        chunks = split_run(sibling.diff, max_chunk_bytes=1 << 20, max_layers=1)
        assert [c.layers_done for c in chunks] == [2, 3]  # layer 0 stores no rows: it rides with layer 1
        assembler = assembler_for(chunks[0].header, masters)
        assert isinstance(assembler, DiffAssembler)
        assert [assembler.add(c.offset, c.data) for c in chunks] == [2, 3]
        assert assembler.complete
        assert bytes(assembler.buffer) == full_sibling(sibling) == bytes(restore_block(fam.master, sibling.diff, SHIFT))


def test_a_diff_storing_no_rows_still_travels_as_one_header_chunk():
    fam = family(rows=())
    sibling = fam.siblings[0]
    chunks = split_run(sibling.diff)
    assert [(len(c.data), c.layers_done) for c in chunks] == [(0, 3)]
    assembler = DiffAssembler(chunks[0].header, Masters({fam.master_id: fam.master}.get, SHIFT))
    assert assembler.add(chunks[0].offset, chunks[0].data) == 3
    assert bytes(assembler.buffer) == full_sibling(sibling)


def test_a_diff_corrupted_in_transit_is_detected_at_its_layer():
    fam = family()
    diff = bytearray(fam.siblings[0].diff)
    header = read_header(diff)
    diff[header.payload_offset + header.layers[2].offset + 7] ^= 0x10
    chunks = split_run(diff, max_layers=1)
    assembler = DiffAssembler(chunks[0].header, Masters({fam.master_id: fam.master}.get, SHIFT))
    assert assembler.add(chunks[0].offset, chunks[0].data) == 2
    with pytest.raises(CorruptBlockError, match="layer 2 checksum mismatch"):
        assembler.add(chunks[1].offset, chunks[1].data)


def test_a_receiver_without_the_master_refuses_the_run_naming_it():
    fam = family()
    header = split_run(fam.siblings[0].diff)[0].header
    with pytest.raises(ValueError, match=f"references master {fam.master_id.hex()}, which this receiver does not hold"):
        assembler_for(header, Masters({}.get, SHIFT))
    assert isinstance(assembler_for(header, None), RunAssembler)  # not restoring: the diff is handed over as is


def test_a_paced_receiver_hands_over_restored_siblings():
    fam = family()
    runs = [fam.master] + [s.diff for s in fam.siblings]
    clock = VirtualClock()
    tx = EmulatedNIC("tx", 0.8, burst_ms=0.01, clock=clock, sleep=clock.sleep)
    rx = EmulatedNIC("rx", 0.8, burst_ms=0.01, clock=clock, sleep=clock.sleep)
    received: dict[int, bytes] = {}
    held = {}

    def on_run(index: int, buf: bytearray) -> None:
        received[index] = bytes(buf)
        if index == 0:
            held[fam.master_id] = received[0]  # the master arrived first in the same transfer

    header = fabric_pb2.TransferHeader(transfer_id="t", dst_nic="rx", total_bytes=run_bytes(runs, 4096, 1))

    async def scenario():
        async with tx.transfer(header.total_bytes) as sent, rx.transfer(header.total_bytes) as got:
            receiver = PacedReceiver(got, on_run=on_run, masters=Masters(held.get, SHIFT))
            async for message in paced_chunks(runs, sent, header, 4096, max_layers=1):
                m = decode_chunk(message)
                await receiver.add(m.run, m.run_header, m.offset, m.data)

    asyncio.run(clock.run_until_complete([scenario()]))
    assert received == {0: fam.master} | {i + 1: full_sibling(s) for i, s in enumerate(fam.siblings)}
