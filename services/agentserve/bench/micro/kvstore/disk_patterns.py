"""`agentserve bench disk-patterns`: how fast this machine's disk reads the same bytes in the
patterns a KV store can issue, all cold. It is the evidence behind the store's on-disk layout.

Virtual disks reward some patterns far more than others. A file per block makes every block read
a request of one block, wherever the blocks lie, so what matters is the rate of block-sized
requests next to the sequential rate:

- `sequential_1MB` / `sequential_16MB`: one stream over one file (the kernel's readahead issues
  large requests);
- `streams_contiguous_1MB`: `concurrency` streams, each over its own contiguous range of the file
  in 1 MB reads (readahead on): what segment files holding a chain each would give;
- `threads_interleaved_1MB` / `_4MB`: `concurrency` threads reading the file in 1 MB or 4 MB
  requests at interleaved offsets, readahead off (`POSIX_FADV_RANDOM`);
- `block_files_1MB`: the same bytes as 1 MB files written one after another (as a store writes
  blocks), read by `concurrency` threads.

Every pattern reads the same number of bytes; each pass runs them all back to back, and the output
has every pass and each pattern's median with its ratio to the median sequential rate.
"""

from __future__ import annotations

import os
import statistics
import tempfile
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from agentserve.bench.micro.kvstore.disk import CHUNK, LARGE_READ, MBps, RawFile, drop_cache


def run(data_dir: Path | None = None, mb: int = 512, concurrency: int = 4, passes: int = 3) -> dict:
    if mb < 16 or concurrency <= 0 or passes <= 0:
        raise ValueError("mb must be at least 16, concurrency and passes positive")
    with tempfile.TemporaryDirectory(prefix="disk-patterns-", dir=data_dir) as tmp:
        root = Path(tmp)
        raw = RawFile(root, mb << 20)
        files = _write_block_files(root / "blocks", raw.nbytes // CHUNK)
        rows = [_one_pass(raw, files, concurrency) for _ in range(passes)]
        raw.remove()
    medians = {name: statistics.median(row[name] for row in rows) for name in rows[0]}
    sequential = max(medians["sequential_1MB"], medians["sequential_16MB"])
    return {
        "MB": raw.nbytes / 1e6,
        "concurrency": concurrency,
        "median_MBps": medians,
        "vs_sequential": {name: round(value / sequential, 3) for name, value in medians.items()},
        "passes": rows,
    }


def _one_pass(raw: RawFile, files: list[Path], concurrency: int) -> dict[str, float]:
    return {
        "sequential_1MB": raw.sequential_MBps(CHUNK),
        "sequential_16MB": raw.sequential_MBps(LARGE_READ),
        "streams_contiguous_1MB": _MBps(raw.nbytes, lambda: _contiguous_streams(raw, concurrency)),
        "threads_interleaved_1MB": _interleaved(raw, CHUNK, concurrency),
        "threads_interleaved_4MB": _interleaved(raw, 4 * CHUNK, concurrency),
        "block_files_1MB": _MBps(raw.nbytes, lambda: _block_files(files, concurrency)),
    }


def _MBps(nbytes: int, read: Callable[[], object]) -> float:
    start = time.perf_counter()
    read()
    return MBps(nbytes, time.perf_counter() - start)


def _write_block_files(directory: Path, count: int) -> list[Path]:
    directory.mkdir()
    data = os.urandom(CHUNK)
    paths = [directory / f"{i:06d}.kv" for i in range(count)]
    for path in paths:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT, 0o644)
        try:
            os.write(fd, data)
            os.fsync(fd)
        finally:
            os.close(fd)
    return paths


def _contiguous_streams(raw: RawFile, concurrency: int) -> None:
    drop_cache(raw.path)
    part = raw.nbytes // concurrency // CHUNK * CHUNK

    def stream(i: int) -> None:
        fd = os.open(raw.path, os.O_RDONLY)  # its own open file: its own readahead state
        try:
            end = raw.nbytes if i == concurrency - 1 else (i + 1) * part
            for offset in range(i * part, end, CHUNK):
                os.pread(fd, CHUNK, offset)
        finally:
            os.close(fd)

    with ThreadPoolExecutor(concurrency) as pool:
        list(pool.map(stream, range(concurrency)))


def _interleaved(raw: RawFile, request: int, concurrency: int) -> float:
    return raw.parallel_reads_MBps(range(0, raw.nbytes, request), request, concurrency, os.POSIX_FADV_RANDOM)


def _block_files(paths: list[Path], concurrency: int) -> None:
    for path in paths:
        drop_cache(path)

    def read(path: Path) -> None:
        fd = os.open(path, os.O_RDONLY)
        try:
            os.pread(fd, CHUNK, 0)
        finally:
            os.close(fd)

    with ThreadPoolExecutor(concurrency) as pool:
        list(pool.map(read, paths))
