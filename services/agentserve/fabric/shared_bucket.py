"""A token bucket several processes draw from: one node's storage NIC shared by its engines.

Engines are processes, so a node's SNIC cannot be one in-process `TokenBucket`. This one keeps the
bucket's state in a small file (under /dev/shm by default), read and written under an exclusive
`flock` by every reservation, so the engines of a node are paced by one bucket: together they get
the node's rate, and an engine whose neighbours are idle gets all of it. The clock is
CLOCK_MONOTONIC, which every process on the machine shares.

The burst follows the node, not the process: the catch-up burst while any engine of the node is
sending (a shared count of sending engines), the idle burst otherwise (see `fabric.nic`).

File layout (little-endian): level f64 | stamp f64 | sending engines i64.
"""

from __future__ import annotations

import asyncio
import fcntl
import mmap
import os
import struct
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from agentserve.fabric.token_bucket import Clock, Sleep, TokenBucket

_STATE = struct.Struct("<ddq")


class SharedTokenBucket(TokenBucket):
    def __init__(
        self,
        path: str | Path,
        rate: float,
        idle_burst: float,
        busy_burst: float,
        clock: Clock = time.monotonic,
        sleep: Sleep = asyncio.sleep,
    ) -> None:
        """Attach to (or create, full) the bucket at `path`; every process must pass the same rate."""
        super().__init__(rate, idle_burst, clock, sleep)
        if not busy_burst >= idle_burst:
            raise ValueError(f"busy burst must be >= idle burst, got {busy_burst!r} < {idle_burst!r}")
        self.idle_burst, self.busy_burst = float(idle_burst), float(busy_burst)
        self.path = Path(path)
        self._fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o600)
        with self._locked_file():
            if os.fstat(self._fd).st_size < _STATE.size:
                os.ftruncate(self._fd, _STATE.size)
                os.pwrite(self._fd, _STATE.pack(self.idle_burst, clock(), 0), 0)
        self._map = mmap.mmap(self._fd, _STATE.size)

    def close(self) -> None:
        self._map.close()
        os.close(self._fd)

    def level(self) -> float:
        with self._state():
            self._refill()
            return self._level

    def reserve(self, nbytes: int) -> float:
        with self._state():
            return super().reserve(nbytes)

    def refund(self, nbytes: int) -> None:
        with self._state():
            super().refund(nbytes)

    def set_burst(self, burst: float) -> None:
        """The NIC's senders went 0 -> 1 (`busy_burst`) or 1 -> 0 (`idle_burst`) in this process."""
        with self._state() as sending:
            sending[0] += 1 if burst >= self.busy_burst else -1
            self._refill()
            self.burst = self.busy_burst if sending[0] > 0 else self.idle_burst
            self._level = min(self._level, self.burst)

    @contextmanager
    def _locked_file(self) -> Iterator[None]:
        fcntl.flock(self._fd, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(self._fd, fcntl.LOCK_UN)

    @contextmanager
    def _state(self) -> Iterator[list[int]]:
        """The shared state loaded into this bucket's fields, stored back on exit, under the lock."""
        with self._locked_file():
            self._level, self._stamp, count = _STATE.unpack_from(self._map)
            sending = [count]
            self.burst = self.busy_burst if count > 0 else self.idle_burst
            yield sending
            _STATE.pack_into(self._map, 0, self._level, self._stamp, max(0, sending[0]))
