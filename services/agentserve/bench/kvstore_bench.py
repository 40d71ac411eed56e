"""`agentserve bench kvstore`: read and write speed of the block store next to the raw disk.

For each block size: durable writes (fsync per block, and group commit with concurrent writers),
cold reads (each block file dropped from the page cache first), warm reads (page cache), DRAM-tier
reads, and a layer-range read; then the same 1 MB blocks read over gRPC from a kvstore process
(cold, then warm), next to the same reads in process.

The raw disk is measured in the same run, since the machines are shared and noisy: sequential
reads of one big file (dd-style, helped by the kernel's readahead; then again with 16 MB reads,
`cold_read_vs_raw_large_reads_1MB`, where the dd-style pass understates the device) and 1 MB reads
at random offsets of it (what any store that is not read in write order gets). Reads run
`concurrency` threads (or gRPC streams), each over its share of the blocks in write order.
"""

from __future__ import annotations

import asyncio
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from agentserve.bench.kvstore_blocks import BlockMaker, block_id_for
from agentserve.bench.kvstore_disk import KVStoreProcess, drop_cache, raw_disk, summary
from agentserve.kvstore.client import KVStoreClient
from agentserve.kvstore.store import block_path
from agentserve.kvstore.tiered import TieredStore

FINGERPRINT = "agentserve.bench.kvstore"
SIZES = {"64KB": 64 << 10, "1MB": 1 << 20, "8MB": 8 << 20}
NUM_LAYERS = 32
BIG_BUDGET = 1 << 40


def _open(data_dir: Path, dram: int = 0, group_commit: bool = False) -> TieredStore:
    return TieredStore.open(data_dir, dram_budget_bytes=dram, ssd_budget_bytes=BIG_BUDGET, group_commit=group_commit)


def _parallel(fn, items: list, concurrency: int) -> tuple[int, float, list[float]]:
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


def _reader(store: TieredStore, layers: range | None = None):
    def read(block_id: bytes) -> int:
        got = store.read(block_id, FINGERPRINT, layers)
        if got is None:
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


async def _grpc_reads(address: str, data_dir: Path, ids: list[bytes], concurrency: int) -> dict:
    """Cold, then warm: `concurrency` Read streams over shares of `ids`; latency from one-block
    Read RPCs made one at a time."""
    async with KVStoreClient(address, timeout_s=600) as client:
        async def stream(share: list[bytes]) -> int:
            return sum([len(r.data) async for r in client.read(FINGERPRINT, share)])

        async def timed_streams() -> tuple[int, float]:
            start = time.perf_counter()
            counts = await asyncio.gather(*(stream(ids[i::concurrency]) for i in range(concurrency)))
            return sum(counts), time.perf_counter() - start

        async def one_at_a_time(sample: list[bytes]) -> list[float]:
            latencies = []
            for block_id in sample:
                start = time.perf_counter()
                await stream([block_id])
                latencies.append(time.perf_counter() - start)
            return latencies

        _drop_blocks(data_dir, ids[:50])
        cold_latencies = await one_at_a_time(ids[:50])
        warm_latencies = await one_at_a_time(ids[:50])
        _drop_blocks(data_dir, ids)
        cold = summary(*await timed_streams(), cold_latencies)
        warm = summary(*await timed_streams(), warm_latencies)
    return {"grpc_read_cold": cold, "grpc_read_warm": warm}


def run(data_dir: Path | None = None, mb_per_size: int = 256, raw_mb: int = 1024, concurrency: int = 4,
        sizes: tuple[str, ...] = tuple(SIZES)) -> dict:
    if mb_per_size <= 0 or raw_mb <= 0 or concurrency <= 0:
        raise ValueError("mb_per_size, raw_mb and concurrency must be positive")
    unknown = [s for s in sizes if s not in SIZES]
    if unknown:
        raise ValueError(f"unknown block sizes {unknown}; choose from {', '.join(SIZES)}")
    with tempfile.TemporaryDirectory(prefix="kvstore-bench-", dir=data_dir) as tmp:
        root = Path(tmp)
        result: dict = {"concurrency": concurrency, **raw_disk(root, raw_mb << 20, concurrency), "sizes": {}}
        ids_1mb: list[bytes] = []
        for label in sizes:
            result["sizes"][label], ids = bench_size(root, label, SIZES[label], mb_per_size << 20, concurrency)
            if label == "1MB":
                ids_1mb = ids
        if ids_1mb:
            one = result["sizes"]["1MB"]
            with KVStoreProcess(root / "1MB", "--dram-budget-bytes", "0") as kvstore:
                one.update(asyncio.run(_grpc_reads(kvstore.address, root / "1MB", ids_1mb, concurrency)))
            result["cold_read_vs_raw_1MB"] = round(one["read_cold"]["MBps"] / result["raw_disk_read_MBps"], 3)
            result["cold_read_vs_raw_large_reads_1MB"] = round(
                one["read_cold"]["MBps"] / result["raw_disk_read_large_MBps"], 3)
            result["cold_read_vs_raw_random_1MB"] = round(
                one["read_cold"]["MBps"] / result["raw_disk_random_read_1MB_MBps"], 3)
            result["grpc_vs_inprocess_read_1MB"] = round(one["grpc_read_cold"]["MBps"] / one["read_cold"]["MBps"], 3)
            result["grpc_vs_inprocess_read_1MB_warm"] = round(
                one["grpc_read_warm"]["MBps"] / one["read_warm"]["MBps"], 3)
    return result
