"""Disk-side helpers of the kvstore benchmarks: raw sequential throughput, cold page cache,
latency summaries, and a kvstore process to measure gRPC against."""

from __future__ import annotations

import os
import random
import signal
import statistics
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc
from agentserve.common.netutil import free_port  # noqa: F401 - also imported from here

CHUNK = 1 << 20
LARGE_READ = 16 << 20


def drop_cache(path: str | os.PathLike) -> None:
    """Evict a file's (clean) pages from the page cache, so the next read comes from the disk."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
    finally:
        os.close(fd)


def raw_disk(directory: Path, nbytes: int, concurrency: int) -> dict:
    """One big file: sequential write (fsync at the end), cold sequential read (dd-style, 1 MB
    reads, with the kernel's readahead), cold 1 MB reads at random offsets from `concurrency`
    threads, and a cold sequential read in 16 MB reads.

    The 16 MB pass is there because on some virtual disks the dd-style figure is not what the
    device can do: on this project's VMs the first read of a freshly written file in 1 MB reads
    runs at ~0.35 GB/s, while 16 MB reads of it, or any re-read, run at 0.9-1.8 GB/s."""
    path = directory / "raw-disk.bin"
    chunk = os.urandom(CHUNK)
    start = time.perf_counter()
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        for _ in range(nbytes // CHUNK):
            os.write(fd, chunk)
        os.fsync(fd)
    finally:
        os.close(fd)
    write_s = time.perf_counter() - start
    drop_cache(path)
    read_s = _sequential_read_s(path, CHUNK)
    drop_cache(path)
    offsets = random.Random(0).sample(range(0, nbytes - CHUNK + 1, CHUNK), nbytes // CHUNK)
    fd = os.open(path, os.O_RDONLY)
    try:
        start = time.perf_counter()
        with ThreadPoolExecutor(concurrency) as pool:
            list(pool.map(lambda offset: os.pread(fd, CHUNK, offset), offsets))
        random_s = time.perf_counter() - start
    finally:
        os.close(fd)
    drop_cache(path)
    large_s = _sequential_read_s(path, LARGE_READ)  # last, so the figures before it are taken as they always were
    path.unlink()
    mb = nbytes / 1e6
    return {"raw_disk_read_MBps": round(mb / read_s, 1), "raw_disk_read_large_MBps": round(mb / large_s, 1),
            "raw_disk_random_read_1MB_MBps": round(mb / random_s, 1), "raw_disk_write_MBps": round(mb / write_s, 1)}


def _sequential_read_s(path: Path, read_bytes: int) -> float:
    start = time.perf_counter()
    fd = os.open(path, os.O_RDONLY)
    try:
        while os.read(fd, read_bytes):
            pass
    finally:
        os.close(fd)
    return time.perf_counter() - start


def summary(nbytes: int, wall_s: float, latencies_s: list[float]) -> dict:
    lat = sorted(latencies_s)
    p99 = lat[min(len(lat) - 1, int(0.99 * len(lat)))] if lat else 0.0
    return {"MBps": round(nbytes / 1e6 / wall_s, 1), "p50_ms": round(1000 * statistics.median(lat), 3) if lat else 0.0,
            "p99_ms": round(1000 * p99, 3), "ops": len(lat)}



class KVStoreProcess:
    """`python -m agentserve.kvstore` on loopback, for as long as the `with` block runs."""

    def __init__(self, data_dir: Path, *args: str) -> None:
        self.port = free_port()
        self.address = f"127.0.0.1:{self.port}"
        self._args = ["--host", "127.0.0.1", "--grpc-port", str(self.port), "--data-dir", str(data_dir), *args]
        self._log = data_dir.parent / f"kvstore-{self.port}.log"
        self._proc: subprocess.Popen | None = None

    def __enter__(self) -> KVStoreProcess:
        with open(self._log, "w") as log:
            self._proc = subprocess.Popen([sys.executable, "-m", "agentserve.kvstore", *self._args],
                                          stdout=log, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + 120
        with grpc.insecure_channel(self.address) as channel:
            stub = health_pb2_grpc.HealthStub(channel)
            while time.monotonic() < deadline:
                if self._proc.poll() is not None:
                    raise RuntimeError(f"kvstore exited with {self._proc.returncode}: {self._log.read_text()[-2000:]}")
                try:
                    status = stub.Check(health_pb2.HealthCheckRequest(), timeout=1).status
                    if status == health_pb2.HealthCheckResponse.SERVING:
                        return self
                except grpc.RpcError:
                    pass
                time.sleep(0.2)
        self.__exit__()
        raise TimeoutError(f"kvstore at {self.address} not SERVING after 120 s")

    def __exit__(self, *exc_info: object) -> None:
        if self._proc is not None and self._proc.poll() is None:
            self._proc.send_signal(signal.SIGTERM)
            try:
                self._proc.wait(15)
            except subprocess.TimeoutExpired:
                self._proc.kill()
                self._proc.wait()
