"""Disk-side helpers of the kvstore benchmarks: raw sequential throughput, cold page cache,
latency summaries, and a kvstore process to measure gRPC against."""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import time
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc

from agentserve.bench.common.stats import percentile
from agentserve.common.netutil import free_port

CHUNK = 1 << 20
LARGE_READ = 16 << 20


def drop_cache(path: str | os.PathLike) -> None:
    """Evict a file's (clean) pages from the page cache, so the next read comes from the disk."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
    finally:
        os.close(fd)


class RawFile:
    """One big file of random bytes, written once (fsync'd) and then read back cold at will: the
    raw-disk baseline the store's reads are compared with."""

    def __init__(self, directory: Path, nbytes: int) -> None:
        if nbytes < CHUNK:
            raise ValueError(f"the raw file needs at least {CHUNK} bytes, got {nbytes}")
        self.path = directory / "raw-disk.bin"
        self.nbytes = nbytes - nbytes % CHUNK
        chunk = os.urandom(CHUNK)
        start = time.perf_counter()
        fd = os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        try:
            for _ in range(self.nbytes // CHUNK):
                os.write(fd, chunk)
            os.fsync(fd)
        finally:
            os.close(fd)
        self.write_MBps = self._MBps(time.perf_counter() - start)

    def sequential_MBps(self, read_bytes: int = CHUNK) -> float:
        """Cold sequential read of the whole file in `read_bytes` reads (the kernel's readahead on)."""
        drop_cache(self.path)
        start = time.perf_counter()
        fd = os.open(self.path, os.O_RDONLY)
        try:
            while os.read(fd, read_bytes):
                pass
        finally:
            os.close(fd)
        return self._MBps(time.perf_counter() - start)

    def best_sequential_MBps(self) -> float:
        """The faster of a dd-style pass (1 MB reads) and a pass of 16 MB reads: on these virtual
        disks either can be the slow one (see the kvstore README), and the baseline should be what
        the device can do, not the unlucky pass."""
        return max(self.sequential_MBps(CHUNK), self.sequential_MBps(LARGE_READ))

    def random_MBps(self, concurrency: int) -> float:
        """Cold 1 MB reads at random offsets from `concurrency` threads."""
        offsets = random.Random(0).sample(range(0, self.nbytes - CHUNK + 1, CHUNK), self.nbytes // CHUNK)
        return self.parallel_reads_MBps(offsets, CHUNK, concurrency)

    def parallel_reads_MBps(
        self, offsets: Sequence[int], request: int, concurrency: int, advice: int | None = None
    ) -> float:
        """Cold `request`-byte reads at `offsets` (covering the file once) from `concurrency`
        threads, after `posix_fadvise(advice)` if given (e.g. POSIX_FADV_RANDOM: no readahead)."""
        drop_cache(self.path)
        fd = os.open(self.path, os.O_RDONLY)
        try:
            if advice is not None:
                os.posix_fadvise(fd, 0, 0, advice)
            start = time.perf_counter()
            with ThreadPoolExecutor(concurrency) as pool:
                list(pool.map(lambda offset: os.pread(fd, request, offset), offsets))
            return self._MBps(time.perf_counter() - start)
        finally:
            os.close(fd)

    def remove(self) -> None:
        self.path.unlink(missing_ok=True)

    def _MBps(self, seconds: float) -> float:
        return MBps(self.nbytes, seconds)


def MBps(nbytes: int, seconds: float) -> float:
    """The rate every kvstore bench figure is printed in: MB (10^6 bytes) per second, 0.1 apart."""
    return round(nbytes / 1e6 / seconds, 1)


def raw_disk(raw: RawFile, concurrency: int) -> dict:
    """The raw file's figures: its write, its first read (dd-style, right after writing: on this
    project's VMs that pass alone often runs at ~0.35 GB/s), random 1 MB reads and 16 MB reads."""
    return {
        "raw_disk_first_read_MBps": raw.sequential_MBps(CHUNK),
        "raw_disk_random_read_1MB_MBps": raw.random_MBps(concurrency),
        "raw_disk_read_large_MBps": raw.sequential_MBps(LARGE_READ),
        "raw_disk_write_MBps": raw.write_MBps,
    }


def summary(nbytes: int, wall_s: float, latencies_s: list[float]) -> dict:
    p50, p99 = percentile(latencies_s, 50), percentile(latencies_s, 99)
    return {
        "MBps": MBps(nbytes, wall_s),
        "p50_ms": round(1000 * p50, 3) if p50 is not None else 0.0,
        "p99_ms": round(1000 * p99, 3) if p99 is not None else 0.0,
        "ops": len(latencies_s),
    }


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
            self._proc = subprocess.Popen(
                [sys.executable, "-m", "agentserve.kvstore", *self._args], stdout=log, stderr=subprocess.STDOUT
            )
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
