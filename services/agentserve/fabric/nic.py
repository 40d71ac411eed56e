"""Emulated NICs: a token bucket per NIC, and transfers paced by one NIC or by both ends of a link.

An engine owns two NICs, `snic` (storage network) and `cnic` (compute network). Every KV byte it
sends or receives goes through a `Transfer` on the NIC(s) it crosses:

    async with nic.transfer(expected_bytes=total) as t:   # counted in nic's queue depth from here
        for chunk in chunks:
            await t.pace(len(chunk))                       # returns when the chunk may go
            ...send chunk...

A transfer pays its latency once, before its first byte (chunks behind it are pipelined), and is
paced by every NIC it names: `Link(src, dst).transfer()` reserves on both buckets at the same
instant and sleeps once, for the longer of the two waits, so the pair runs at the slower NIC's
share without adding the two waits or the two latencies (the link's latency is the larger one).
When the two ends live in different processes, each end paces its own NIC; the receiver subtracts
the sender's latency (see `stream.py`).

Queue depth (`NICStats.queue_bytes`) is the bytes of open transfers not yet let through: declared
up front with `expected_bytes`, so the DualPath scheduler sees a whole queued load, not only the
chunk at the head. `gbps=0` means unshaped: nothing waits, bytes are still counted.

`shared_bucket` names a file through which NICs of several processes draw from one bucket
(`shared_bucket.SharedTokenBucket`): a node's storage NIC shared by its engines, `gbps` being the
whole node's. Queue depth and counters stay per process: each engine's own.
"""

from __future__ import annotations

import asyncio
import enum
import time
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass
from types import TracebackType

from agentserve.fabric.shared_bucket import SharedTokenBucket
from agentserve.fabric.token_bucket import Clock, Sleep, TokenBucket

# An idle NIC holds at most DEFAULT_BURST_MS of tokens, so a new transfer starts almost as on a
# real wire (a 1 MiB chunk at 1 Gbps waits ~6 ms, not 8.4). While transfers are sending it may bank
# up to DEFAULT_CATCHUP_MS, so a sender or receiver that wakes late, or whose process was off the
# CPU for a while, catches up instead of losing that time: over any window T a NIC lets through
# at most rate * T + catch-up bytes, and never more than rate * T + burst since it was idle.
DEFAULT_BURST_MS = 2.0
DEFAULT_CATCHUP_MS = 50.0


class TransferState(enum.Enum):
    PENDING = "pending"  # declared, no byte let through yet (latency, waiting for tokens)
    TRANSFERRING = "transferring"
    DONE = "done"
    FAILED = "failed"


@dataclass(frozen=True)
class NICStats:
    name: str
    gbps: float  # configured; 0 = unshaped
    latency_ms: float
    queue_bytes: int  # bytes of open transfers not yet let through
    active_transfers: int
    bytes_total: int  # let through since start
    transfers_total: int  # finished (done or failed)
    wait_s_total: float  # time chunks spent waiting for this NIC's tokens
    busy_s_total: float  # bytes_total at the configured rate: time the wire was occupied


class EmulatedNIC:
    def __init__(
        self,
        name: str,
        gbps: float,
        latency_ms: float = 0.0,
        burst_ms: float = DEFAULT_BURST_MS,
        catchup_ms: float = DEFAULT_CATCHUP_MS,
        clock: Clock = time.monotonic,
        sleep: Sleep = asyncio.sleep,
        shared_bucket: str | None = None,
    ) -> None:
        if not gbps >= 0:
            raise ValueError(f"NIC {name}: gbps must be >= 0 (0 = unshaped), got {gbps!r}")
        if not latency_ms >= 0:
            raise ValueError(f"NIC {name}: latency_ms must be >= 0, got {latency_ms!r}")
        if not burst_ms > 0:
            raise ValueError(f"NIC {name}: burst_ms must be positive, got {burst_ms!r}")
        if not catchup_ms >= burst_ms:
            raise ValueError(f"NIC {name}: catchup_ms must be >= burst_ms, got {catchup_ms!r}")
        self.name = name
        self.gbps = float(gbps)
        self.latency_ms = float(latency_ms)
        self.clock = clock
        self.sleep = sleep
        self._idle_burst = self.bytes_per_s * burst_ms / 1000
        self._busy_burst = self.bytes_per_s * catchup_ms / 1000
        self.bucket: TokenBucket | None = None
        if gbps > 0 and shared_bucket:
            self.bucket = SharedTokenBucket(
                shared_bucket, self.bytes_per_s, self._idle_burst, self._busy_burst, clock, sleep
            )
        elif gbps > 0:
            self.bucket = TokenBucket(self.bytes_per_s, self._idle_burst, clock, sleep)
        self.shared = bool(shared_bucket)
        self._queued = 0
        self._active = 0
        self._senders = 0  # open transfers that have sent a chunk
        self._bytes = 0
        self._transfers = 0
        self._wait_s = 0.0

    @property
    def bytes_per_s(self) -> float:
        """Configured rate in bytes/s; 0 when unshaped."""
        return self.gbps * 1e9 / 8

    def transfer(self, expected_bytes: int = 0, latency_ms: float | None = None) -> Transfer:
        """A transfer over this NIC alone; `latency_ms` overrides the NIC's (e.g. 0 on a receiver)."""
        return Transfer((self,), expected_bytes, self.latency_ms if latency_ms is None else latency_ms)

    async def transmit(self, nbytes: int) -> float:
        """Pace one message of `nbytes` (latency included); returns the seconds spent waiting for tokens."""
        async with self.transfer(nbytes) as t:
            await t.pace(nbytes)
        return t.queue_wait_s

    @asynccontextmanager
    async def send(self, nbytes: int) -> AsyncIterator[Transfer]:
        """Pace `nbytes`, then run the body (which sends them) inside the finished transfer."""
        async with self.transfer(nbytes) as t:
            await t.pace(nbytes)
            yield t

    def _streaming(self, delta: int) -> None:
        """A transfer sent its first chunk (+1) or closed after sending (-1): banks catch-up only meanwhile."""
        self._senders += delta
        if self.bucket is not None and self._senders == (1 if delta > 0 else 0):
            self.bucket.set_burst(self._busy_burst if delta > 0 else self._idle_burst)

    def stats(self) -> NICStats:
        return NICStats(
            name=self.name,
            gbps=self.gbps,
            latency_ms=self.latency_ms,
            queue_bytes=self._queued,
            active_transfers=self._active,
            bytes_total=self._bytes,
            transfers_total=self._transfers,
            wait_s_total=self._wait_s,
            busy_s_total=self._bytes / self.bytes_per_s if self.bucket is not None else 0.0,
        )

    def __repr__(self) -> str:
        return f"EmulatedNIC({self.name!r}, gbps={self.gbps}, latency_ms={self.latency_ms})"


class Link:
    """The two NICs a transfer crosses when both are in this process (or in a simulation)."""

    def __init__(self, src: EmulatedNIC, dst: EmulatedNIC) -> None:
        if src is dst:
            raise ValueError(f"a link needs two different NICs, got {src.name} twice")
        self.src = src
        self.dst = dst

    def transfer(self, expected_bytes: int = 0) -> Transfer:
        return Transfer((self.src, self.dst), expected_bytes, max(self.src.latency_ms, self.dst.latency_ms))


async def transfer_pace(src: EmulatedNIC, dst: EmulatedNIC, nbytes: int) -> float:
    """Pace one message of `nbytes` over both NICs; returns the seconds spent waiting for tokens."""
    async with Link(src, dst).transfer(nbytes) as t:
        await t.pace(nbytes)
    return t.queue_wait_s


class Transfer:
    """One KV movement through one or two NICs. Use as `async with`; `pace()` each chunk."""

    def __init__(self, nics: Sequence[EmulatedNIC], expected_bytes: int, latency_ms: float) -> None:
        if expected_bytes < 0:
            raise ValueError(f"expected_bytes must be >= 0, got {expected_bytes}")
        self.nics = tuple(nics)
        self.expected_bytes = expected_bytes
        self.latency_s = latency_ms / 1000
        self.state = TransferState.PENDING
        self.bytes = 0
        self.chunks = 0
        self.queue_wait_s = 0.0
        self.started_at = self.first_byte_at = self.ended_at = 0.0
        self._clock = self.nics[0].clock
        self._sleep = self.nics[0].sleep
        self._unpaced = 0  # bytes this transfer still holds in the NICs' queue depth
        self._sending = False  # past the latency: counted in the NICs' `_senders`

    async def __aenter__(self) -> Transfer:
        self.started_at = self._clock()
        self._hold(self.expected_bytes)
        for nic in self.nics:
            nic._active += 1
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.ended_at = self._clock()
        self.state = TransferState.FAILED if exc_type is not None else TransferState.DONE
        self._hold(-self._unpaced)
        for nic in self.nics:
            nic._active -= 1
            nic._transfers += 1
            if self._sending:
                nic._streaming(-1)

    async def pace(self, nbytes: int) -> float:
        """Wait until `nbytes` may go (latency first, once); returns the seconds waited for tokens."""
        if self.state is not TransferState.PENDING and self.state is not TransferState.TRANSFERRING:
            raise RuntimeError(f"pace() on a {self.state.value} transfer")
        self._hold(max(0, nbytes - self._unpaced))  # bytes beyond the declared total queue too
        try:
            if not self._sending:
                if self.latency_s > 0:
                    await self._sleep(self.latency_s)
                for nic in self.nics:  # from the first byte on, not during the latency
                    nic._streaming(+1)
                self._sending = True
            delay = await self._wait_for_tokens(nbytes)
        finally:
            self._hold(-min(nbytes, self._unpaced))
        if self.chunks == 0:
            self.first_byte_at = self._clock()
        self.state = TransferState.TRANSFERRING
        self.chunks += 1
        self.bytes += nbytes
        self.queue_wait_s += delay
        for nic in self.nics:
            nic._bytes += nbytes
        return delay

    @property
    def elapsed_s(self) -> float:
        """From entering the transfer to leaving it (or to now while it is open)."""
        end = self.ended_at if self.state in (TransferState.DONE, TransferState.FAILED) else self._clock()
        return end - self.started_at

    def achieved_gbps(self) -> float:
        return self.bytes * 8 / max(self.elapsed_s, 1e-9) / 1e9

    async def _wait_for_tokens(self, nbytes: int) -> float:
        shaped = [(nic, nic.bucket) for nic in self.nics if nic.bucket is not None]
        if not shaped:
            return 0.0
        delays = [bucket.reserve(nbytes) for _, bucket in shaped]
        for (nic, _), delay in zip(shaped, delays):
            nic._wait_s += delay
        delay = max(delays)
        if delay <= 0:
            return 0.0
        for _, bucket in shaped:
            bucket.waiting_bytes += nbytes
        try:
            await self._sleep(delay)
        except asyncio.CancelledError:
            for _, bucket in shaped:
                bucket.refund(nbytes)
            raise
        finally:
            for _, bucket in shaped:
                bucket.waiting_bytes -= nbytes
        return delay

    def _hold(self, nbytes: int) -> None:
        self._unpaced += nbytes
        for nic in self.nics:
            nic._queued += nbytes
