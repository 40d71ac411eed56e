"""NIC state for heartbeats and /metrics; the receiving side of a stream without gRPC."""

from __future__ import annotations

import asyncio

import pytest
import torch
from prometheus_client import CollectorRegistry

from agentserve.fabric.chunks import split_run
from agentserve.fabric.metrics import nic_status, register_nic_metrics
from agentserve.fabric.nic import EmulatedNIC
from agentserve.fabric.stream import (
    PacedReceiver,
    incoming_transfer,
    paced,
    paced_chunks,
    receiver_latency_ms,
    run_bytes,
    transfer_metadata,
)
from agentserve.fabric.virtual_time import VirtualClock
from agentserve.fabric.wire import decode_chunk
from agentserve.kv.block_format import serialize_blocks
from agentserve.v1 import fabric_pb2

pytestmark = pytest.mark.unit


def make_run(seed: int) -> bytes:
    gen = torch.Generator().manual_seed(seed)
    shape = (3, 2, 16, 2, 8)
    k, v = torch.randn(shape, generator=gen), torch.randn(shape, generator=gen)
    return bytes(serialize_blocks(k, v, block_ids=[bytes([seed, i]) * 8 for i in range(2)], fingerprint="fp"))


def test_metrics_and_status_read_the_nics_live():
    clock = VirtualClock()
    snic = EmulatedNIC("snic", 0.08, clock=clock, sleep=clock.sleep)
    cnic = EmulatedNIC("cnic", 0)
    registry = CollectorRegistry()
    register_nic_metrics([snic, cnic], registry)

    async def scenario():
        async with snic.transfer(expected_bytes=300_000) as t:
            await t.pace(100_000)
            return registry.get_sample_value("agentserve_nic_queue_bytes", {"nic": "snic"}), nic_status([snic, cnic])

    ((queued, status),) = asyncio.run(clock.run_until_complete([scenario()]))
    assert queued == 200_000
    assert [(s.name, s.configured_gbps, s.queue_bytes, s.active_transfers, s.bytes_total) for s in status] == [
        ("snic", 0.08, 200_000, 1, 100_000),
        ("cnic", 0.0, 0, 0, 0),
    ]
    assert registry.get_sample_value("agentserve_nic_queue_bytes", {"nic": "snic"}) == 0
    assert registry.get_sample_value("agentserve_nic_bytes_total", {"nic": "snic"}) == 100_000
    assert registry.get_sample_value("agentserve_nic_transfers_total", {"nic": "snic"}) == 1
    assert registry.get_sample_value("agentserve_nic_configured_gbps", {"nic": "cnic"}) == 0


def test_sender_chunks_reassemble_on_a_paced_receiver():
    runs = [make_run(1), make_run(2)]
    clock = VirtualClock()
    tx = EmulatedNIC("tx", 0.8, burst_ms=0.01, clock=clock, sleep=clock.sleep)
    rx = EmulatedNIC("rx", 0.08, burst_ms=0.01, clock=clock, sleep=clock.sleep)  # the slower end sets the pace
    received: list[tuple[int, bytes]] = []
    header = fabric_pb2.TransferHeader(transfer_id="t1", dst_nic="rx", total_bytes=run_bytes(runs, 4096, 1))

    async def scenario():
        async with tx.transfer(header.total_bytes) as sent, rx.transfer(header.total_bytes) as got:
            receiver = PacedReceiver(got, on_run=lambda i, buf: received.append((i, bytes(buf))))
            messages = [decode_chunk(m) async for m in paced_chunks(runs, sent, header, 4096, max_layers=1)]
            for m in messages:
                await receiver.add(m.run, m.run_header, m.offset, m.data)
        return messages, receiver.summary()  # after both transfers closed

    ((messages, summary),) = asyncio.run(clock.run_until_complete([scenario()]))
    assert received == [(0, runs[0]), (1, runs[1])]
    assert [m.transfer for m in messages] == [header] + [None] * (len(messages) - 1)
    assert len(messages) == sum(len(split_run(r, 4096, 1)) for r in runs) == 6
    assert (summary.bytes, summary.chunks, summary.runs) == (header.total_bytes, 6, 2)
    # here the sender runs first, then the receiver paces every byte but its 100-byte burst at 10 MB/s
    sender_s, receiver_s = (header.total_bytes - 1000) / 100e6, (header.total_bytes - 100) / 10e6
    assert summary.elapsed_s == pytest.approx(sender_s + receiver_s)


@pytest.mark.parametrize("sender_ms, receiver_ms, owed", [(30, 50, 20), (50, 30, 0), (0, 0, 0)])
def test_receiver_pays_only_the_latency_the_sender_did_not(sender_ms, receiver_ms, owed):
    header = fabric_pb2.TransferHeader(sender_latency_ms=sender_ms)
    assert receiver_latency_ms(EmulatedNIC("cnic", 0, latency_ms=receiver_ms), header) == owed


class FakeContext:
    def __init__(self, metadata):
        self.metadata = metadata

    def invocation_metadata(self):
        return self.metadata


def test_metadata_carries_total_and_latency_to_a_receiver_of_another_service():
    clock = VirtualClock()
    tx = EmulatedNIC("cnic", 0.8, latency_ms=2, clock=clock, sleep=clock.sleep)
    rx = EmulatedNIC("cnic", 0.8, latency_ms=5, clock=clock, sleep=clock.sleep)
    blocks = [fabric_pb2.FabricChunk(data=bytes(1000)) for _ in range(3)]

    async def scenario():
        async with tx.transfer(3000) as sent:
            metadata = transfer_metadata(sent)
            out = [m async for m in paced(blocks, sent, lambda m: len(m.data))]
        receiving = incoming_transfer(rx, FakeContext(metadata))
        return metadata, out, sent, receiving

    ((metadata, out, sent, receiving),) = asyncio.run(clock.run_until_complete([scenario()]))
    assert metadata == [("agentserve-kv-bytes", "3000"), ("agentserve-sender-latency-ms", "2.0")]
    assert out == blocks and sent.bytes == 3000
    assert (receiving.expected_bytes, receiving.latency_s) == (3000, pytest.approx(0.003))
    bare = incoming_transfer(rx, FakeContext([("agentserve-kv-bytes", "many")]))
    assert (bare.expected_bytes, bare.latency_s) == (0, pytest.approx(0.005))
