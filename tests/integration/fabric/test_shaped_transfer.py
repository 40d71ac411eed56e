"""Real gRPC over loopback: a shaped KV stream to a receiver process, and reassembly on a live server."""

from __future__ import annotations

import asyncio
import multiprocessing

import grpc
import pytest

from agentserve.bench.micro.fabric import _receiver_main, _rx_name, make_run
from agentserve.common.server import GRPC_OPTIONS
from agentserve.fabric.nic import EmulatedNIC
from agentserve.fabric.stream import FabricClient, FabricServicer, add_fabric_to_server

pytestmark = pytest.mark.integration

GBPS = 0.2


@pytest.fixture(scope="module")
def receiver():
    """A receiver process whose NIC is shaped at GBPS; yields its gRPC address."""
    ctx = multiprocessing.get_context("spawn")
    ports = ctx.Queue()
    proc = ctx.Process(target=_receiver_main, args=(ports, (GBPS,)), daemon=True)
    proc.start()
    try:
        grpc_port, _ = ports.get(timeout=60)
        yield f"127.0.0.1:{grpc_port}"
    finally:
        proc.terminate()
        proc.join(timeout=10)


def test_shaped_stream_achieves_the_configured_rate(receiver):
    run = make_run()  # 4 MiB; 6 of them take about 1 s at 0.2 Gbps
    tx = EmulatedNIC("tx", GBPS)

    async def scenario():
        client = FabricClient(receiver)
        try:
            return await client.send([run] * 6, tx, _rx_name(GBPS), max_chunk_bytes=1 << 20, timeout_s=30)
        finally:
            await client.close()

    summary, transfer = asyncio.run(scenario())
    assert summary.bytes == transfer.bytes > 6 * len(run) - 1
    assert 0.9 * GBPS <= transfer.achieved_gbps() <= 1.05 * GBPS
    assert 0.9 * GBPS <= summary.achieved_gbps <= 1.05 * GBPS
    assert (tx.stats().queue_bytes, tx.stats().active_transfers, tx.stats().bytes_total) == (0, 0, transfer.bytes)


def test_runs_reassemble_exactly_over_a_live_server():
    runs = [make_run(seed) for seed in range(2)]
    received: list[tuple[str, int, bytes]] = []

    async def scenario():
        rx = EmulatedNIC("cnic", 0, latency_ms=50)
        server = grpc.aio.server(options=GRPC_OPTIONS)
        add_fabric_to_server(
            FabricServicer({"cnic": rx}, on_run=lambda h, i, buf: received.append((h.transfer_id, i, bytes(buf)))),
            server,
        )
        port = server.add_insecure_port("127.0.0.1:0")
        await server.start()
        client = FabricClient(f"127.0.0.1:{port}")
        try:
            tx = EmulatedNIC("cnic", 0, latency_ms=30)
            summary, transfer = await client.send(runs, tx, "cnic", path="handoff", max_layers=1)
            with pytest.raises(grpc.aio.AioRpcError) as missing:
                await client.send(runs[:1], tx, "snic")
            return summary, transfer, missing.value.code()
        finally:
            await client.close()
            await server.stop(None)

    summary, transfer, code = asyncio.run(scenario())
    assert [(i, buf) for _, i, buf in received] == [(0, runs[0]), (1, runs[1])]
    assert summary.runs == 2 and summary.chunks == 8  # 4 layers per run, one chunk each
    assert transfer.elapsed_s >= 0.05  # 30 ms paid by the sender, the other 20 by the receiver
    assert summary.elapsed_s >= 0.02
    assert code == grpc.StatusCode.NOT_FOUND


def test_bench_reports_every_key_for_a_short_run():
    from agentserve.bench.micro.fabric import run as bench

    report = bench(duration_s=0.3, rates=(0.5,), streams=(1, 2), repeats=1, raw_bytes=16 << 20)
    assert {
        "shaping_accuracy_min",
        "shaping_accuracy_max",
        "fairness_max_over_min",
        "grpc_vs_tcp",
        "grpc_unshaped_gbps",
        "tcp_gbps",
        "cases",
    } <= set(report)
    assert [(c["gbps"], c["streams"]) for c in report["cases"]] == [(0.5, 1), (0.5, 2)]
    assert 0.8 <= report["shaping_accuracy_min"] <= report["shaping_accuracy_max"] <= 1.05
    assert report["grpc_vs_tcp"] > 0
