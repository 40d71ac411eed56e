"""`agentserve bench fabric`: how exactly the emulated fabric shapes real gRPC KV streams.

A receiver runs in a child process (a `Fabric` gRPC server plus a raw TCP sink); this process
sends. Each case runs 1, 2 or 4 concurrent streams over one shaped link (the sender's NIC and the
receiver's NIC both at the case's rate) for about `duration_s`, each stream sending block-format
runs of the tiny model's shape in layer-range chunks. Reported per case: achieved ÷ configured
(aggregate bytes over the wall time from the first stream's start to the last one's end) and the
per-stream spread, from the fastest of `repeats` runs (every run's accuracy is listed too).
`grpc_vs_tcp` compares an unshaped gRPC KV stream with a raw loopback TCP stream between the
same two processes: medians of runs taken alternately, since the machines are shared and noisy.
A case is `cpu_limited` when its rate is near what unshaped gRPC reached in the same run.
"""

from __future__ import annotations

import asyncio
import multiprocessing
import statistics
import time
from collections.abc import Sequence

import grpc

from agentserve.common.server import GRPC_OPTIONS
from agentserve.fabric.nic import EmulatedNIC
from agentserve.fabric.stream import FabricClient, FabricServicer, add_fabric_to_server, run_bytes

RATES_GBPS = (0.5, 1.0, 4.0)
STREAMS = (1, 2, 4)
TARGETS = {"shaping_accuracy_min": 0.95, "shaping_accuracy_max": 1.02, "fairness_max_over_min": 1.1, "grpc_vs_tcp": 0.5}
UNSHAPED = "rx-unshaped"
RUN_SHAPE = (4, 64, 16, 2, 64)  # tiny model, 1024 tokens: layers, blocks, block_size, kv heads, head_dim
# One layer of a run per message: Python gRPC's per-message cost dominates, so 1 MiB messages carry
# 1.5-2x the bytes/s of 256 KiB ones.
CHUNK_BYTES = 1 << 20
# A case whose rate exceeds this share of the unshaped gRPC rate measured in the same run is
# flagged `cpu_limited`: its accuracy then measures this machine, not the shaper.
CPU_HEADROOM = 0.8


def _rx_name(gbps: float) -> str:
    return f"rx-{gbps:g}gbps"


def make_run(seed: int = 0) -> bytes:
    """One run of 64 tiny-model blocks in the block format (4 MiB of fp32 K/V, 1 MiB per layer)."""
    import torch

    from agentserve.kv.block_format import serialize_blocks

    gen = torch.Generator().manual_seed(seed)
    k, v = torch.randn(RUN_SHAPE, generator=gen), torch.randn(RUN_SHAPE, generator=gen)
    ids = [i.to_bytes(16, "big") for i in range(RUN_SHAPE[1])]
    return bytes(serialize_blocks(k, v, block_ids=ids, fingerprint="fabric-bench"))


# ---- receiver process ----------------------------------------------------------------------------


def _receiver_main(ports: multiprocessing.Queue, rates: tuple[float, ...]) -> None:
    asyncio.run(_receive(ports, rates))


async def _receive(ports: multiprocessing.Queue, rates: tuple[float, ...]) -> None:
    nics = {_rx_name(r): EmulatedNIC(_rx_name(r), r) for r in rates}
    nics[UNSHAPED] = EmulatedNIC(UNSHAPED, 0)
    server = grpc.aio.server(options=GRPC_OPTIONS)
    add_fabric_to_server(FabricServicer(nics), server)
    grpc_port = server.add_insecure_port("127.0.0.1:0")
    await server.start()

    async def sink(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        total = 0
        while chunk := await reader.read(1 << 20):
            total += len(chunk)
        writer.write(str(total).encode())
        await writer.drain()
        writer.close()

    tcp = await asyncio.start_server(sink, "127.0.0.1", 0)
    ports.put((grpc_port, tcp.sockets[0].getsockname()[1]))
    await server.wait_for_termination()


# ---- sender --------------------------------------------------------------------------------------


async def _streams(
    client: FabricClient,
    run: bytes,
    nic: EmulatedNIC,
    dst_nic: str,
    streams: int,
    bytes_per_stream: int,
    chunk_bytes: int,
) -> dict:
    per_run = run_bytes([run], chunk_bytes)
    runs = [run] * max(1, round(bytes_per_stream / per_run))
    start = time.perf_counter()
    ends: list[float] = []

    async def one() -> tuple:
        result = await client.send(runs, nic, dst_nic, max_chunk_bytes=chunk_bytes)
        ends.append(time.perf_counter())
        return result

    results = await asyncio.gather(*(one() for _ in range(streams)))
    wall = max(ends) - start
    sent = sum(t.bytes for _, t in results)
    per_stream = [t.achieved_gbps() for _, t in results]
    return {
        "bytes": sent,
        "wall_s": round(wall, 4),
        "achieved_gbps": sent * 8 / wall / 1e9,
        "per_stream_gbps": per_stream,
        "receiver_gbps": [s.achieved_gbps for s, _ in results],
    }


async def _case(
    client: FabricClient, run: bytes, gbps: float, streams: int, duration_s: float, chunk_bytes: int, repeats: int
) -> dict:
    """Best of `repeats` runs: background load on a shared machine only ever slows a run down, so the
    fastest shows the shaper (and any overshoot); every run's accuracy is reported beside it."""
    results = []
    for _ in range(repeats):
        results.append(
            await _streams(
                client,
                run,
                EmulatedNIC("tx", gbps),
                _rx_name(gbps),
                streams,
                int(gbps * 1e9 / 8 * duration_s / streams),
                chunk_bytes,
            )
        )
    result = max(results, key=lambda r: r["achieved_gbps"])
    per_stream = result["per_stream_gbps"]
    return {
        "gbps": gbps,
        "streams": streams,
        "wall_s": result["wall_s"],
        "achieved_gbps": round(result["achieved_gbps"], 4),
        "accuracy": round(result["achieved_gbps"] / gbps, 4),
        "accuracy_runs": [round(r["achieved_gbps"] / gbps, 4) for r in results],
        "per_stream_gbps": [round(x, 4) for x in per_stream],
        "receiver_per_stream_gbps": [round(x, 4) for x in result["receiver_gbps"]],
        "fairness_max_over_min": round(max(per_stream) / min(per_stream), 4),
    }


async def _tcp_gbps(port: int, run: bytes, total: int, chunk_bytes: int) -> float:
    chunks = [run[i : i + chunk_bytes] for i in range(0, len(run), chunk_bytes)]
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    start = time.perf_counter()
    sent = 0
    while sent < total:
        for chunk in chunks:
            writer.write(chunk)
            await writer.drain()
            sent += len(chunk)
    writer.write_eof()
    received = int(await reader.read())
    elapsed = time.perf_counter() - start
    writer.close()
    if received != sent:
        raise RuntimeError(f"TCP sink received {received} of {sent} bytes")
    return sent * 8 / elapsed / 1e9


async def _grpc_vs_tcp(
    client: FabricClient, tcp_port: int, run: bytes, total: int, chunk_bytes: int, reps: int
) -> dict:
    grpc_runs, tcp_runs = [], []
    for _ in range(reps):  # alternate, so both see the same background load
        result = await _streams(client, run, EmulatedNIC("tx", 0), UNSHAPED, 1, total, chunk_bytes)
        grpc_runs.append(result["achieved_gbps"])
        tcp_runs.append(await _tcp_gbps(tcp_port, run, total, chunk_bytes))
    grpc_gbps, tcp_gbps = statistics.median(grpc_runs), statistics.median(tcp_runs)
    return {
        "grpc_unshaped_gbps": round(grpc_gbps, 3),
        "tcp_gbps": round(tcp_gbps, 3),
        "grpc_vs_tcp": round(grpc_gbps / tcp_gbps, 3),
        "grpc_runs_gbps": [round(x, 3) for x in grpc_runs],
        "tcp_runs_gbps": [round(x, 3) for x in tcp_runs],
    }


async def _bench(
    grpc_port: int,
    tcp_port: int,
    rates: Sequence[float],
    streams: Sequence[int],
    duration_s: float,
    chunk_bytes: int,
    repeats: int,
    raw_bytes: int,
) -> dict:
    run = make_run()
    client = FabricClient(f"127.0.0.1:{grpc_port}")
    try:
        await _streams(client, run, EmulatedNIC("tx", 0), UNSHAPED, 1, 8 << 20, chunk_bytes)  # connect, warm up
        raw = await _grpc_vs_tcp(client, tcp_port, run, raw_bytes, chunk_bytes, 2 * repeats + 1)
        cases = [await _case(client, run, gbps, n, duration_s, chunk_bytes, repeats) for gbps in rates for n in streams]
    finally:
        await client.close()
    for case in cases:
        case["cpu_limited"] = case["gbps"] > CPU_HEADROOM * raw["grpc_unshaped_gbps"]
    fairness = [c["fairness_max_over_min"] for c in cases if c["streams"] > 1] or [1.0]
    within = [c["accuracy"] for c in cases if not c["cpu_limited"]]
    out = {
        "shaping_accuracy_min": min(c["accuracy"] for c in cases),
        "shaping_accuracy_max": max(c["accuracy"] for c in cases),
        "fairness_max_over_min": max(fairness),
        "shaping_accuracy_min_within_capacity": min(within) if within else None,
        "grpc_vs_tcp": raw["grpc_vs_tcp"],
        "grpc_unshaped_gbps": raw["grpc_unshaped_gbps"],
        "tcp_gbps": raw["tcp_gbps"],
    }
    out["meets_targets"] = {
        "shaping_accuracy_min": out["shaping_accuracy_min"] >= TARGETS["shaping_accuracy_min"],
        "shaping_accuracy_max": out["shaping_accuracy_max"] <= TARGETS["shaping_accuracy_max"],
        "fairness_max_over_min": out["fairness_max_over_min"] <= TARGETS["fairness_max_over_min"],
        "grpc_vs_tcp": out["grpc_vs_tcp"] >= TARGETS["grpc_vs_tcp"],
    }
    out.update(
        {
            "targets": TARGETS,
            "chunk_bytes": chunk_bytes,
            "run_bytes": len(run),
            "duration_s": duration_s,
            "repeats": repeats,
            "raw": raw,
            "cases": cases,
        }
    )
    return out


def run(
    duration_s: float = 1.5,
    chunk_bytes: int = CHUNK_BYTES,
    rates: Sequence[float] = RATES_GBPS,
    streams: Sequence[int] = STREAMS,
    repeats: int = 2,
    raw_bytes: int = 256 << 20,
) -> dict:
    """Run every case against a receiver in a child process; returns the report (see module doc)."""
    if duration_s <= 0 or chunk_bytes <= 0 or repeats <= 0:
        raise ValueError("duration, chunk size and repeats must be positive")
    ctx = multiprocessing.get_context("spawn")
    ports = ctx.Queue()
    receiver = ctx.Process(target=_receiver_main, args=(ports, tuple(rates)), daemon=True)
    receiver.start()
    try:
        grpc_port, tcp_port = ports.get(timeout=60)
        return asyncio.run(_bench(grpc_port, tcp_port, rates, streams, duration_s, chunk_bytes, repeats, raw_bytes))
    finally:
        receiver.terminate()
        receiver.join(timeout=10)


def scaled_profile(name: str, unshaped_gbps: float) -> dict:
    """The profile scaled to this machine's measured prefill speed, and whether gRPC can carry it."""
    from agentserve.engine.local_compute import measure_local_compute
    from agentserve.fabric.profiles import load_profile

    profile = load_profile(name)
    local = measure_local_compute()
    scaled = profile.scaled(local.kv_bytes_per_token, local.prefill_tokens_per_s)
    peak = max(max(nics.snic.gbps, nics.cnic.gbps) for nics in scaled.engines.values())
    return {
        **scaled.to_dict(),
        "local_prefill_tokens_per_s": round(local.prefill_tokens_per_s, 1),
        "local_kv_bytes_per_token": local.kv_bytes_per_token,
        "fits_unshaped_grpc": peak <= unshaped_gbps,
    }
