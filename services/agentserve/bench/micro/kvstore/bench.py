"""`agentserve bench kvstore`: read and write speed of the block store next to the raw disk.

For each block size: durable writes (fsync per block, and group commit with concurrent writers),
cold reads (each block file dropped from the page cache first), warm reads (page cache), DRAM-tier
reads, and a layer-range read; then the same 1 MB blocks read over gRPC from a kvstore process
(cold, then warm, with one-block latencies). Reads run `concurrency` threads (or gRPC streams),
each over its share of the blocks in write order.

The machines are shared and their virtual disks swing by 2-4x from one minute to the next, so the
two headline ratios come from `passes` side-by-side passes over the same 1 MB blocks, each pass
one after the other: the raw disk (one big file read sequentially, the faster of 1 MB and 16 MB
reads), the store in process, and the store over gRPC, all cold; then the store over gRPC from
its DRAM tier, the ceiling of gRPC serving on this machine. `cold_read_vs_raw_1MB` and
`grpc_vs_inprocess_read_1MB` are the medians of the per-pass ratios; every pass is in the output.
"""

from __future__ import annotations

import asyncio
import statistics
import tempfile
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from agentserve.bench.micro.kvstore.blocks import BlockMaker, block_id_for
from agentserve.bench.micro.kvstore.disk import KVStoreProcess, MBps, RawFile, drop_cache, raw_disk, summary
from agentserve.kvstore.client import KVStoreClient
from agentserve.kvstore.layout import block_path
from agentserve.kvstore.store import KVStore
from agentserve.kvstore.types import BlockRead

FINGERPRINT = "agentserve.bench.kvstore"
SIZES = {"64KB": 64 << 10, "1MB": 1 << 20, "8MB": 8 << 20}
NUM_LAYERS = 32
BIG_BUDGET = 1 << 40


def _open(data_dir: Path, dram: int = 0, group_commit: bool = False) -> KVStore:
    return KVStore.open(data_dir, dram_budget_bytes=dram, ssd_budget_bytes=BIG_BUDGET, group_commit=group_commit)


def _parallel(fn: Callable[[Any], int], items: list, concurrency: int) -> tuple[int, float, list[float]]:
    """Run fn(item) -> bytes over `concurrency` threads, each taking every concurrency-th item."""
    latencies: list[float] = []

    def worker(share: list) -> int:
        nbytes = 0
        for item in share:
            start = time.perf_counter()
            nbytes += fn(item)
            latencies.append(time.perf_counter() - start)
        return nbytes

    start = time.perf_counter()
    with ThreadPoolExecutor(concurrency) as pool:
        nbytes = sum(pool.map(worker, [items[i::concurrency] for i in range(concurrency)]))
    return nbytes, time.perf_counter() - start, latencies


def _drop_blocks(data_dir: Path, ids: list[bytes]) -> None:
    for block_id in ids:
        drop_cache(block_path(data_dir, block_id))


def _stream_reader(store: KVStore) -> Callable[[list[bytes]], int]:
    """Read a share of the blocks as one stream with read-ahead, as a Read RPC does: -> bytes."""

    def read(share: list[bytes]) -> int:
        nbytes = count = 0
        for got in store.read_stream(share, FINGERPRINT):
            nbytes, count = nbytes + len(got.data), count + 1
        if count != len(share):
            raise RuntimeError(f"{len(share) - count} blocks missing from the bench store")
        return nbytes

    return read


def _streams(store: KVStore, ids: list[bytes], concurrency: int) -> tuple[int, float]:
    """`concurrency` in-process read streams over shares of `ids`: (bytes, seconds)."""
    start = time.perf_counter()
    with ThreadPoolExecutor(concurrency) as pool:
        nbytes = sum(pool.map(_stream_reader(store), [ids[i::concurrency] for i in range(concurrency)]))
    return nbytes, time.perf_counter() - start


def _reader(store: KVStore, layers: range | None = None) -> Callable[[bytes], int]:
    def read(block_id: bytes) -> int:
        got = store.read(block_id, FINGERPRINT, layers)
        if not isinstance(got, BlockRead):
            raise RuntimeError(f"block {block_id.hex()} missing from the bench store")
        return len(got.data)

    return read


def bench_size(root: Path, label: str, size: int, total_bytes: int, concurrency: int) -> tuple[dict, list[bytes]]:
    maker = BlockMaker(FINGERPRINT, size, NUM_LAYERS, seed=size)
    count = max(8, total_bytes // size)
    blocks = [(block_id_for(i, label), maker.make(block_id_for(i, label))) for i in range(count)]
    ids = [b for b, _ in blocks]
    data_dir = root / label
    out: dict = {"blocks": count, "block_bytes": len(blocks[0][1])}

    store = _open(data_dir)
    try:
        nbytes, wall, lat = _parallel(lambda b: len(b[1]) if store.put(b[0], b[1], FINGERPRINT) else 0, blocks, 1)
        out["write_fsync_each"] = summary(nbytes, wall, lat)
        _drop_blocks(data_dir, ids)
        out["read_cold"] = summary(*_parallel(_reader(store), ids, concurrency))
        out["read_warm"] = summary(*_parallel(_reader(store), ids, concurrency))
        out["read_layers_0_4_warm"] = summary(*_parallel(_reader(store, range(0, 4)), ids, concurrency))
    finally:
        store.close()

    grouped = _open(root / f"{label}-group", group_commit=True)
    try:
        put = lambda b: len(b[1]) if grouped.put(b[0], b[1], FINGERPRINT) else 0  # noqa: E731
        out["write_group_commit"] = summary(*_parallel(put, blocks, concurrency))
    finally:
        grouped.close()

    dram = _open(data_dir, dram=BIG_BUDGET)
    try:
        _parallel(_reader(dram), ids, concurrency)  # promotes every block
        out["read_dram"] = summary(*_parallel(_reader(dram), ids, concurrency))
    finally:
        dram.close()
    return out, ids


async def _grpc_stream_reads(client: KVStoreClient, ids: list[bytes], concurrency: int) -> tuple[int, float]:
    """`concurrency` Read streams over shares of `ids`: (bytes, seconds)."""

    async def stream(share: list[bytes]) -> int:
        return sum([len(r.data) async for r in client.read(FINGERPRINT, share)])

    start = time.perf_counter()
    counts = await asyncio.gather(*(stream(ids[i::concurrency]) for i in range(concurrency)))
    return sum(counts), time.perf_counter() - start


async def _grpc_reads(address: str, data_dir: Path, ids: list[bytes], concurrency: int) -> dict:
    """Cold, then warm: `concurrency` Read streams over shares of `ids`; latency from one-block
    Read RPCs made one at a time."""
    async with KVStoreClient(address, timeout_s=600) as client:

        async def one_at_a_time(sample: list[bytes]) -> list[float]:
            latencies = []
            for block_id in sample:
                start = time.perf_counter()
                await _grpc_stream_reads(client, [block_id], 1)
                latencies.append(time.perf_counter() - start)
            return latencies

        _drop_blocks(data_dir, ids[:50])
        cold_latencies = await one_at_a_time(ids[:50])
        warm_latencies = await one_at_a_time(ids[:50])
        _drop_blocks(data_dir, ids)
        cold = summary(*await _grpc_stream_reads(client, ids, concurrency), cold_latencies)
        warm = summary(*await _grpc_stream_reads(client, ids, concurrency), warm_latencies)
    return {"grpc_read_cold": cold, "grpc_read_warm": warm}


async def _grpc_cold_MBps(address: str, data_dir: Path, ids: list[bytes], concurrency: int) -> float:
    async with KVStoreClient(address, timeout_s=600) as client:
        await client.lookup(ids[:1])  # connect first: the pass times reads, not the handshake
        _drop_blocks(data_dir, ids)
        nbytes, seconds = await _grpc_stream_reads(client, ids, concurrency)
    return MBps(nbytes, seconds)


async def _grpc_dram_MBps(address: str, ids: list[bytes], concurrency: int) -> float:
    """The same streams served from the kvstore's DRAM tier: a first pass promotes every block, the
    second is timed. No disk read at all, so it is the most gRPC serving can deliver here."""
    async with KVStoreClient(address, timeout_s=600) as client:
        await _grpc_stream_reads(client, ids, concurrency)
        nbytes, seconds = await _grpc_stream_reads(client, ids, concurrency)
    return MBps(nbytes, seconds)


def side_by_side(raw: RawFile, data_dir: Path, ids: list[bytes], concurrency: int, passes: int) -> dict:
    """`passes` rounds of raw disk, store in process and store over gRPC, all cold, back to back;
    then the store over gRPC from DRAM (no disk), the ceiling the gRPC figure is up against."""
    rows = []
    for _ in range(passes):
        raw_MBps = raw.best_sequential_MBps()
        store = _open(data_dir)
        try:
            _drop_blocks(data_dir, ids)
            nbytes, seconds = _streams(store, ids, concurrency)
            inprocess = MBps(nbytes, seconds)
        finally:
            store.close()
        with KVStoreProcess(data_dir, "--dram-budget-bytes", "0") as kvstore:
            grpc_MBps = asyncio.run(_grpc_cold_MBps(kvstore.address, data_dir, ids, concurrency))
        # Its own process: with DRAM on, the cold pass above would also copy each block into DRAM.
        with KVStoreProcess(data_dir, "--dram-budget-bytes", str(BIG_BUDGET)) as kvstore:
            dram_MBps = asyncio.run(_grpc_dram_MBps(kvstore.address, ids, concurrency))
        rows.append(
            {
                "raw_sequential_MBps": raw_MBps,
                "store_cold_MBps": inprocess,
                "grpc_cold_MBps": grpc_MBps,
                "grpc_dram_MBps": dram_MBps,
                "cold_read_vs_raw": round(inprocess / raw_MBps, 3),
                "grpc_vs_inprocess": round(grpc_MBps / inprocess, 3),
                "grpc_dram_vs_inprocess": round(dram_MBps / inprocess, 3),
            }
        )
    return {
        "raw_disk_read_MBps": statistics.median(r["raw_sequential_MBps"] for r in rows),
        "cold_read_vs_raw_1MB": statistics.median(r["cold_read_vs_raw"] for r in rows),
        "grpc_vs_inprocess_read_1MB": statistics.median(r["grpc_vs_inprocess"] for r in rows),
        # gRPC from DRAM over the in-process cold read: what grpc_vs_inprocess would be if the
        # store's disk reads cost the gRPC path nothing.
        "grpc_dram_vs_inprocess_read_1MB": statistics.median(r["grpc_dram_vs_inprocess"] for r in rows),
        "passes_1MB": rows,
    }


def run(
    data_dir: Path | None = None,
    mb_per_size: int = 256,
    raw_mb: int = 1024,
    concurrency: int = 4,
    sizes: tuple[str, ...] = tuple(SIZES),
    passes: int = 3,
) -> dict:
    if mb_per_size <= 0 or raw_mb <= 0 or concurrency <= 0 or passes <= 0:
        raise ValueError("mb_per_size, raw_mb, concurrency and passes must be positive")
    unknown = [s for s in sizes if s not in SIZES]
    if unknown:
        raise ValueError(f"unknown block sizes {unknown}; choose from {', '.join(SIZES)}")
    with tempfile.TemporaryDirectory(prefix="kvstore-bench-", dir=data_dir) as tmp:
        root = Path(tmp)
        raw = RawFile(root, raw_mb << 20)
        result: dict = {"concurrency": concurrency, **raw_disk(raw, concurrency), "sizes": {}}
        ids_1mb: list[bytes] = []
        for label in sizes:
            result["sizes"][label], ids = bench_size(root, label, SIZES[label], mb_per_size << 20, concurrency)
            if label == "1MB":
                ids_1mb = ids
        if ids_1mb:
            one = result["sizes"]["1MB"]
            with KVStoreProcess(root / "1MB", "--dram-budget-bytes", "0") as kvstore:
                one.update(asyncio.run(_grpc_reads(kvstore.address, root / "1MB", ids_1mb, concurrency)))
            result["grpc_vs_inprocess_read_1MB_warm"] = round(
                one["grpc_read_warm"]["MBps"] / one["read_warm"]["MBps"], 3
            )
            result["cold_read_vs_raw_random_1MB"] = round(
                one["read_cold"]["MBps"] / result["raw_disk_random_read_1MB_MBps"], 3
            )
            result.update(side_by_side(raw, root / "1MB", ids_1mb, concurrency, passes))
        raw.remove()
    return result
