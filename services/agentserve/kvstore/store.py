"""The store engines talk to: a DRAM cache over the SSD tier, each within a byte budget.

- Writes go to SSD first and are acknowledged only when durable (`SsdTier`), then cached in
  DRAM. DRAM is inclusive (every DRAM block is also on SSD), so evicting from DRAM costs no IO
  and evicting from SSD drops the block from DRAM too.
- Budgets hold at every instant: a write reserves its bytes (evicting first) before its file
  exists, so SSD bytes + bytes in flight never exceed the SSD budget; a block that cannot fit
  because everything else is pinned is refused (`StoreFullError`), never squeezed in.
- Whole-block SSD reads are promoted into DRAM; layer-range reads are not (they read part of a
  block, and a layerwise load touches each block once per layer).
- Eviction order comes from one `EvictionPolicy` per tier, chosen by name (`lru` by default);
  pins (Pin with a TTL) are enforced here, whatever the policy.
- A diff block (a shared block's sibling stored against its master, `kv.block_diff`) is accepted
  only when its master is stored (or comes earlier in the same write) and matches it; the master
  is then kept while any of its mirrors is (`Mirrors`), and deleting or dropping it drops them.
  A read of a diff returns the diff: the receiver restores it against the master as it arrives.
- Streams of reads and writes (`read_stream`, `write_stream`, in `streams`) are the one
  implementation in-process callers and the gRPC servicer share.

Thread-safe: one lock guards the tiers' bookkeeping; file IO runs outside it.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import AsyncIterable, Callable, Sequence
from typing import Literal, overload

from agentserve.common.errors import RetryableError
from agentserve.kv.block_diff import check_master
from agentserve.kv.block_format import BlockHeader, check_fingerprint, payload_range
from agentserve.kv.block_hash import check_block_id, checked_block_ids
from agentserve.kv.eviction import DEFAULT_EVICTION_POLICY, Hint, make_eviction_policy
from agentserve.kvstore.blockfile import Layers, resolve_layers
from agentserve.kvstore.dram import DramTier
from agentserve.kvstore.mirrors import Mirrors
from agentserve.kvstore.pins import Pins, pick_victims
from agentserve.kvstore.rates import RateMeter
from agentserve.kvstore.readahead import READ_AHEAD_BYTES
from agentserve.kvstore.ssd import DEFAULT_MAX_BLOCK_BYTES, BlockRejectedError, SsdTier
from agentserve.kvstore.streams import ReadStream, WriteBatchCallback, write_stream
from agentserve.kvstore.types import (
    NOT_CACHED,
    BlockRead,
    LookupResult,
    NotCached,
    StoreStats,
    Tier,
    TierStats,
    WriteResult,
)
from agentserve.kvstore.verify import verify_block

log = logging.getLogger(__name__)

MAX_PIN_TTL_S = 24 * 3600.0
NOWAIT_MAX_BYTES = 4 << 20  # a `nowait` read of a bigger SSD block is not tried (checksums take ~1 ms/3 MB)


class StoreFullError(RetryableError):
    """The SSD budget is taken by pinned blocks and writes in flight; retry after unpins."""


class KVStore:
    def __init__(
        self,
        ssd: SsdTier,
        *,
        dram_budget_bytes: int,
        ssd_budget_bytes: int,
        eviction_policy: str = DEFAULT_EVICTION_POLICY,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        if ssd_budget_bytes <= 0:
            raise ValueError(f"SSD budget must be positive, got {ssd_budget_bytes}")
        self.ssd = ssd
        self.ssd_budget_bytes = ssd_budget_bytes
        self._lock = threading.Lock()
        self._clock = clock
        self._pins = Pins(clock)
        self._mirrors = Mirrors()
        self.dram = DramTier(dram_budget_bytes, make_eviction_policy(eviction_policy), self._pins.pinned)
        self._ssd_policy = make_eviction_policy(eviction_policy)
        self._ssd_hits = self._ssd_misses = self._ssd_evictions = 0
        self._ssd_peak = ssd.stats().bytes
        self._reads = RateMeter(clock=clock)
        self._writes = RateMeter(clock=clock)
        for block_id in ssd.scanned_oldest_first():  # LRU order survives a restart as write order
            self._ssd_policy.insert(block_id, ssd.size_of(block_id) or 0)
        orphans = []
        for diff_id, master_id in ssd.scanned_masters().items():
            if ssd.contains(master_id):
                self._mirrors.add(diff_id, master_id)
            else:  # its master's delete outlived a crash that undid the diff's: unrestorable
                orphans.append(diff_id)
        with self._lock:
            for diff_id in orphans:
                ssd.delete(diff_id, durable=False)
                self._forget(diff_id)
        ssd.sync_deletes(orphans)
        with self._lock:
            self._make_ssd_room(0)  # the budget may have shrunk since the last run

    @classmethod
    def open(
        cls,
        data_dir: str | os.PathLike,
        *,
        dram_budget_bytes: int,
        ssd_budget_bytes: int,
        fsync: bool = True,
        group_commit: bool = False,
        max_block_bytes: int = DEFAULT_MAX_BLOCK_BYTES,
        eviction_policy: str = DEFAULT_EVICTION_POLICY,
        clock: Callable[[], float] = time.monotonic,
    ) -> KVStore:
        ssd = SsdTier(data_dir, fsync=fsync, max_block_bytes=max_block_bytes, group_commit=group_commit)
        try:
            return cls(
                ssd,
                dram_budget_bytes=dram_budget_bytes,
                ssd_budget_bytes=ssd_budget_bytes,
                eviction_policy=eviction_policy,
                clock=clock,
            )
        except BaseException:
            ssd.close()
            raise

    def close(self) -> None:
        self.ssd.close()

    # -- writes -----------------------------------------------------------------------------------

    def put(self, block_id: bytes, data: bytes, fingerprint: str) -> bool:
        """Durably store one block; False if it was already stored. Bad blocks raise ValueError."""
        stored, rejected = self._write(fingerprint, [(block_id, data)], 0)
        if rejected is not None:
            raise rejected.cause
        return stored[0]

    def put_many(self, fingerprint: str, blocks: Sequence[tuple[bytes, bytes]], first_index: int = 0) -> WriteResult:
        """Durably store blocks in order. Raises BlockRejectedError at the first bad one (indexed
        from `first_index`) after the blocks before it are durable; StoreFullError if pins leave
        no room (nothing of this call written)."""
        stored, rejected = self._write(fingerprint, blocks, first_index)
        if rejected is not None:
            raise rejected
        result = WriteResult()
        for (_, data), new in zip(blocks, stored):
            result += WriteResult(1, 0, len(data)) if new else WriteResult(0, 1, 0)
        return result

    def _write(
        self, fingerprint: str, blocks: Sequence[tuple[bytes, bytes]], first_index: int
    ) -> tuple[list[bool], BlockRejectedError | None]:
        if not fingerprint:
            raise ValueError("model fingerprint must not be empty")
        # Verified before any room is made, so a bad write never evicts a good block.
        blocks, headers, rejected = self._verified_prefix(fingerprint, [(bytes(b), d) for b, d in blocks], first_index)
        with self._lock:
            blocks, headers, rejected = self._masters_still_stored(blocks, headers, rejected, first_index)
            new = {b: len(d) for b, d in blocks if not self.ssd.contains(b)}
            for (block_id, _), header in zip(blocks, headers):  # registered first: the room made next keeps the master
                if header.diff is not None and block_id in new:
                    self._mirrors.add(block_id, header.diff.master_id)
            for block_id, _ in blocks:  # a write uses the blocks it repeats: never evict them for it
                if block_id not in new:
                    self._ssd_policy.touch(block_id)
            self._make_ssd_room(sum(new.values()))
            self.ssd.reserve(sum(new.values()))
            # Bytes on disk never exceed stored + reserved, so this bounds the true peak.
            self._ssd_peak = max(self._ssd_peak, sum(self.ssd.committed_bytes()))
        stored: list[bool | None] = [None] * len(blocks)  # None: unknown (the write raised)
        try:
            # Only `new` is written (a block stored at reservation but evicted since has no room
            # reserved); `write` releases what it did not use.
            written, _ = self.ssd.write(fingerprint, blocks, first_index, verified=True, reserved=new)
            stored = list(written)
        finally:
            with self._lock:
                for (block_id, data), header, is_new in zip(blocks, headers, stored):
                    if not self.ssd.contains(block_id):
                        self._mirrors.remove(block_id)
                        continue  # not written, or deleted since: keep it out of DRAM and the policy
                    if is_new is False:
                        self._ssd_policy.touch(block_id)  # again, so the batch ends in request order
                        continue
                    self._ssd_policy.insert(block_id, len(data))
                    if is_new:
                        self._writes.add(len(data))
                        self.dram.insert(block_id, bytes(data), header)
        return [bool(s) for s in stored], rejected

    def _verified_prefix(
        self,
        fingerprint: str,
        blocks: list[tuple[bytes, bytes]],
        first_index: int,
    ) -> tuple[list[tuple[bytes, bytes]], list[BlockHeader], BlockRejectedError | None]:
        """The blocks before the first bad one, their headers, and the bad one's rejection."""
        headers: list[BlockHeader] = []
        for i, (block_id, data) in enumerate(blocks):
            try:
                if len(data) > self.ssd_budget_bytes:  # could never be stored, not even in an empty tier
                    raise ValueError(f"block is {len(data)} bytes, over the SSD budget of {self.ssd_budget_bytes}")
                header = verify_block(block_id, data, fingerprint, self.ssd.max_block_bytes)
                if header.diff is not None:
                    check_master(self._master_header(header.diff.master_id, block_id, blocks[:i], headers), header)
                headers.append(header)
            except ValueError as exc:
                return blocks[:i], headers, BlockRejectedError(first_index + i, block_id, exc)
        return blocks, headers, None

    def _master_header(
        self, master_id: bytes, diff_id: bytes, earlier: list[tuple[bytes, bytes]], headers: list[BlockHeader]
    ) -> BlockHeader:
        """The header of a diff's master: earlier in the same write, in DRAM, or on SSD."""
        for (block_id, _), header in zip(earlier, headers):
            if block_id == master_id:
                return header
        with self._lock:
            cached = self.dram.header_of(master_id)
        found = cached if cached is not None else self.ssd.header(master_id)
        if found is None:
            raise ValueError(
                f"diff block {diff_id.hex()} references master {master_id.hex()}, which is not stored: "
                "store the master first (or in the same write, before its diffs)"
            )
        return found

    def _masters_still_stored(
        self,
        blocks: list[tuple[bytes, bytes]],
        headers: list[BlockHeader],
        rejected: BlockRejectedError | None,
        first_index: int,
    ) -> tuple[list[tuple[bytes, bytes]], list[BlockHeader], BlockRejectedError | None]:
        """Cut the write at a diff whose master was evicted or deleted since it was checked (under the lock)."""
        earlier: set[bytes] = set()
        for i, ((block_id, _), header) in enumerate(zip(blocks, headers)):
            master_id = None if header.diff is None else header.diff.master_id
            if master_id is not None and not self.ssd.contains(master_id) and master_id not in earlier:
                cause = ValueError(f"diff block {block_id.hex()}: its master {master_id.hex()} was removed meanwhile")
                return blocks[:i], headers[:i], BlockRejectedError(first_index + i, block_id, cause)
            earlier.add(block_id)
        return blocks, headers, rejected

    # -- reads ------------------------------------------------------------------------------------

    @overload
    def read(
        self, block_id: bytes, fingerprint: str | None = None, layers: Layers = None, nowait: Literal[False] = False
    ) -> BlockRead | None: ...

    @overload
    def read(
        self, block_id: bytes, fingerprint: str | None = None, layers: Layers = None, nowait: bool = False
    ) -> BlockRead | None | NotCached: ...

    def read(
        self, block_id: bytes, fingerprint: str | None = None, layers: Layers = None, nowait: bool = False
    ) -> BlockRead | None | NotCached:
        """The whole block or `layers` of it (a range, or a slice with an open stop), from the
        fastest tier holding it; None if not stored (or found corrupt, then dropped). Raises
        ValueError for a malformed id, FingerprintMismatchError for another model's block,
        LayerRangeError for absent layers.
        With `nowait`, returns NOT_CACHED (counting nothing) rather than wait for the disk: an
        event loop serves DRAM and page-cache hits in place and sends the rest to a thread."""
        block_id = bytes(block_id)
        check_block_id(block_id)
        with self._lock:
            entry = self.dram.get(block_id, count_miss=not nowait)
            if entry is not None:
                self._ssd_policy.touch(block_id)
        if entry is not None:
            hit = _slice(block_id, entry.data, entry.header, fingerprint, layers)
            with self._lock:
                self._reads.add(len(hit.data))
            return hit
        if nowait and (self.ssd.size_of(block_id) or 0) > NOWAIT_MAX_BYTES:
            return NOT_CACHED  # verifying it would hold the caller's event loop too long
        read = self.ssd.read(block_id, fingerprint, layers, nowait)
        if read is NOT_CACHED:
            return read
        orphans: list[bytes] = []
        with self._lock:
            self.dram.misses += nowait  # not counted above, as the read might have been handed on
            if read is None:
                self._ssd_misses += 1
                if not self.ssd.contains(block_id):
                    self._forget(block_id)  # dropped as corrupt, or never there
                    orphans = self._drop_mirrors(block_id)  # unrestorable without their master
            else:
                self._ssd_hits += 1
                self._reads.add(len(read.data))
                if self.ssd.contains(block_id):
                    self._ssd_policy.touch(block_id)
                    if read.whole and len(read.data) <= self.dram.budget_bytes:
                        # DRAM keeps an immutable copy: a nowait read's buffer is a bytearray.
                        self.dram.insert(block_id, bytes(read.data), read.header)
        self.ssd.sync_deletes(orphans)
        return read

    def size_of(self, block_id: bytes) -> int | None:
        """The stored size of a block (from the index; no disk IO), None if not stored."""
        return self.ssd.size_of(bytes(block_id))

    def prefetch(self, block_ids: Sequence[bytes]) -> None:
        """Start SSD reads of those `block_ids` not in DRAM (see `SsdTier.prefetch`); no waiting."""
        with self._lock:
            cold = [b for b in map(bytes, block_ids) if b not in self.dram]
        self.ssd.prefetch(cold)

    def read_stream(
        self,
        block_ids: Sequence[bytes],
        fingerprint: str | None = None,
        layers: Layers = None,
        read_ahead_bytes: int = READ_AHEAD_BYTES,
    ) -> ReadStream:
        """`read` of each id in order, ending at the first one not stored, with the blocks after the
        one being read on their way from disk (whole-block reads). Iterate it in process (`for`,
        blocking) or on an event loop (`async for`: warm blocks in place, cold ones in a worker
        thread), as the servicer's Read and Get do. Raises LayerRangeError for an empty range."""
        return ReadStream(self, block_ids, fingerprint, layers, read_ahead_bytes)

    async def write_stream(
        self, blocks: AsyncIterable[tuple[str, bytes, bytes]], on_batch: WriteBatchCallback | None = None
    ) -> WriteResult:
        """Durably store `(fingerprint, block_id, data)` as they arrive, in batches committed in a
        worker thread while the next batch arrives; see `streams.write_stream`."""
        return await write_stream(self, blocks, on_batch)

    def get(self, block_id: bytes, fingerprint: str | None = None) -> bytes | None:
        read = self.read(block_id, fingerprint)
        return None if read is None else bytes(read.data)  # no copy: a waiting read's data is bytes

    def lookup(self, block_ids: Sequence[bytes]) -> LookupResult:
        """The longest stored prefix and each id's tier; malformed ids are simply not stored."""
        with self._lock:
            tiers = tuple(self._tier(bytes(b)) for b in block_ids)
        prefix = next((i for i, t in enumerate(tiers) if t is Tier.NONE), len(tiers))
        return LookupResult(prefix, tiers)

    # -- lifecycle --------------------------------------------------------------------------------

    def pin(self, block_ids: Sequence[bytes], ttl_s: float) -> int:
        """Keep stored blocks from eviction for `ttl_s` seconds; returns how many were stored."""
        if not 0 < ttl_s <= MAX_PIN_TTL_S:
            raise ValueError(f"pin ttl_s must be in (0, {MAX_PIN_TTL_S:.0f}], got {ttl_s}")
        ids = checked_block_ids(block_ids)
        with self._lock:
            present = [b for b in ids if self.ssd.contains(b)]
            for block_id in present:
                hint = Hint(pin_until=self._pins.pin(block_id, ttl_s))
                self._ssd_policy.hint(block_id, hint)
                self.dram.hint(block_id, hint)
        return len(present)

    def unpin(self, block_ids: Sequence[bytes]) -> int:
        ids = checked_block_ids(block_ids)
        with self._lock:
            return sum(self._pins.unpin(b) for b in ids)

    def hint(self, block_ids: Sequence[bytes], hint: Hint) -> int:
        """Pass advice to both tiers' policies; returns how many ids are stored."""
        ids = checked_block_ids(block_ids)
        with self._lock:
            present = [b for b in ids if self.ssd.contains(b)]
            for block_id in present:
                self._ssd_policy.hint(block_id, hint)
                self.dram.hint(block_id, hint)
        return len(present)

    def hint_from_now(self, priority: int | None = None, next_use_in_s: float | None = None) -> Hint:
        """A `Hint` whose expected next use is `next_use_in_s` from now on the store's clock."""
        return Hint(priority=priority, next_use_at=None if next_use_in_s is None else self._clock() + next_use_in_s)

    def delete(self, block_ids: Sequence[bytes]) -> int:
        """Remove blocks from every tier (durably); returns how many were stored. A master's
        mirrors go with it (not counted): they cannot be restored without it."""
        ids = checked_block_ids(block_ids)
        with self._lock:
            deleted = [b for b in ids if self.ssd.delete(b, durable=False)]
            orphans = []
            for block_id in ids:
                self._forget(block_id)
                self._pins.unpin(block_id)
                orphans += self._drop_mirrors(block_id)
        self.ssd.sync_deletes(deleted + orphans)
        return len(deleted)

    def stats(self) -> StoreStats:
        ssd = self.ssd.stats()
        with self._lock:
            d = self.dram
            return StoreStats(
                dram=TierStats(Tier.DRAM, len(d), d.bytes, d.budget_bytes, d.hits, d.misses, d.evictions, d.peak_bytes),
                ssd=TierStats(
                    Tier.SSD,
                    ssd.blocks,
                    ssd.bytes,
                    self.ssd_budget_bytes,
                    self._ssd_hits,
                    self._ssd_misses,
                    self._ssd_evictions,
                    self._ssd_peak,
                ),
                reserved_bytes=self.ssd.committed_bytes()[1],
                pinned_blocks=self._pins.count(),
                corrupt_dropped=ssd.corrupt_dropped,
                read_bytes=self._reads.total,
                write_bytes=self._writes.total,
                read_bytes_per_s=self._reads.rate(),
                write_bytes_per_s=self._writes.rate(),
            )

    def disk_bytes(self) -> int:
        """Bytes on disk right now, with evictions and new reservations held still meanwhile:
        this is what must never exceed the SSD budget."""
        with self._lock:
            return self.ssd.disk_bytes()

    # -- internals (called under the lock) --------------------------------------------------------

    def _tier(self, block_id: bytes) -> Tier:
        if block_id in self.dram:
            return Tier.DRAM
        return Tier.SSD if self.ssd.contains(block_id) else Tier.NONE

    def _make_ssd_room(self, nbytes: int) -> None:
        excess = sum(self.ssd.committed_bytes()) + nbytes - self.ssd_budget_bytes
        if excess <= 0:
            return
        victims = pick_victims(self._ssd_policy, excess, lambda b: self.ssd.size_of(b) or 0, self._kept)
        if victims is None:
            raise StoreFullError(
                f"SSD tier full: {nbytes} bytes to write, budget {self.ssd_budget_bytes}, "
                f"{self.ssd.committed_bytes()[1]} bytes in flight, {self._pins.count()} blocks pinned"
            )
        for block_id in victims:
            self.ssd.delete(block_id, durable=False)  # a crash may bring it back, intact: harmless
            self._forget(block_id)
            self._ssd_evictions += 1

    def _kept(self, block_id: bytes) -> bool:
        """Not evictable now: pinned, or a master some stored diff is read against."""
        return self._pins.pinned(block_id) or self._mirrors.has_mirrors(block_id)

    def _drop_mirrors(self, master_id: bytes) -> list[bytes]:
        """Remove the mirrors of a master that is gone (not yet durably: see `sync_deletes`)."""
        mirrors = self._mirrors.of(master_id)
        for diff_id in mirrors:
            self.ssd.delete(diff_id, durable=False)
            self._forget(diff_id)
            self._pins.unpin(diff_id)
        if mirrors:
            log.warning("dropped %d diff blocks of master %s, which is gone", len(mirrors), master_id.hex())
        return mirrors

    def _forget(self, block_id: bytes) -> None:
        self.dram.remove(block_id)
        self._ssd_policy.remove(block_id)
        self._mirrors.remove(block_id)


def _slice(block_id: bytes, data: bytes, header: BlockHeader, fingerprint: str | None, layers: Layers) -> BlockRead:
    check_fingerprint(header, fingerprint)
    layers = resolve_layers(layers, header)
    if layers == range(header.num_layers):
        return BlockRead(block_id, data, header.payload_offset, layers, header.num_layers, Tier.DRAM)
    offset, length = payload_range(header, layers.start, layers.stop)
    view = memoryview(data)
    out = bytes(view[: header.payload_offset]) + bytes(view[offset : offset + length])
    return BlockRead(block_id, out, header.payload_offset, layers, header.num_layers, Tier.DRAM)
