"""The SSD tier: one verified file per KV block, keyed by chained block id (paths in `layout`).

A file per block keeps writes, deletes and eviction free of compaction and of a separate index
to keep crash-consistent: the directory is the index. `agentserve bench kvstore` measures what
it costs (see the kvstore README).

Durability contract: `put`/`put_many` return only after each new block was verified, written to a
temp file in its final directory, made durable and atomically renamed into place, and the rename
made durable: per block (fsync of file and directory) or, with `group_commit`, for all
concurrent writers at once (`commit.GroupCommitter`). A crash at any point leaves either no file
or the complete file under the final name; interrupted temp files are removed at the next start.

One process owns a data dir (an exclusive lock file enforces it: a second owner would delete the
first one's in-flight temp files and serve from a stale index). The in-memory index (id -> size)
is rebuilt from the directory at start and is the only shared state, guarded by one lock; file IO
runs outside the lock (renames and unlinks inside it, so the index and the directory agree).
"""

from __future__ import annotations

import itertools
import logging
import os
import threading
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Literal, overload

from agentserve.common.durable_dirs import make_durable_dirs
from agentserve.fabric.malloc import keep_freed_buffers
from agentserve.kv.block_format import BlockHeader, FingerprintMismatchError
from agentserve.kv.block_hash import BLOCK_ID_BYTES
from agentserve.kv.block_header import is_diff_buffer
from agentserve.kvstore.blockfile import (
    LayerRangeError,
    Layers,
    WouldBlock,
    read_head,
    read_layers,
    read_whole,
    wants_whole,
)
from agentserve.kvstore.commit import GroupCommitter, Staged, make_syncfs
from agentserve.kvstore.layout import BLOCK_SUFFIX, DIFF_SUFFIX, TEMP_SUFFIX, lock_dir, scan_blocks
from agentserve.kvstore.types import NOT_CACHED, BlockRead, NotCached, Tier
from agentserve.kvstore.verify import verify_block

log = logging.getLogger(__name__)

DEFAULT_MAX_BLOCK_BYTES = 64 << 20


@dataclass(frozen=True)
class SsdStats:
    blocks: int
    bytes: int
    hits: int
    misses: int
    corrupt_dropped: int


class BlockRejectedError(ValueError):
    """Block `index` of a write failed verification; the blocks before it are stored."""

    def __init__(self, index: int, block_id: bytes, cause: ValueError, total: int | None = None) -> None:
        of_total = "" if total is None else f" of {total}"
        super().__init__(
            f"block {index}{of_total} (id {bytes(block_id)[:16].hex()}) rejected: {cause}; blocks before it are stored"
        )
        self.index = index
        self.block_id = bytes(block_id)
        self.cause = cause

    def of(self, total: int) -> BlockRejectedError:
        """The same rejection, its message saying how many blocks the request had."""
        return BlockRejectedError(self.index, self.block_id, self.cause, total)


class SsdTier:
    def __init__(
        self,
        data_dir: str | os.PathLike,
        fsync: bool = True,
        max_block_bytes: int = DEFAULT_MAX_BLOCK_BYTES,
        group_commit: bool = False,
    ) -> None:
        if max_block_bytes <= 0:
            raise ValueError(f"max_block_bytes must be positive, got {max_block_bytes}")
        self.root = Path(data_dir) / "blocks"
        self._root = str(self.root)
        self.fsync = fsync
        self.group_commit = group_commit and fsync
        self.max_block_bytes = max_block_bytes
        self._lock = threading.Lock()
        self._index: dict[bytes, int] = {}
        self._mtimes: dict[bytes, int] = {}  # from the start-up scan only
        self._diffs: set[bytes] = set()  # ids stored as diff blocks (files ending in DIFF_SUFFIX)
        self._scanned_masters: dict[bytes, bytes] = {}  # diff id -> master id, from the start-up scan only
        self._bytes = 0
        self._reserved = 0
        self._hits = self._misses = self._corrupt = 0
        self._made_dirs: set[str] = set()
        self._seq = itertools.count()
        keep_freed_buffers()  # every read returns a fresh block-sized buffer
        if fsync:
            make_durable_dirs(self.root)  # the data dir too, if new: its entry is in its parent
        else:
            self.root.mkdir(parents=True, exist_ok=True)
        self._lock_file = lock_dir(Path(data_dir))
        self._committer = (
            GroupCommitter(make_syncfs(self.root), self._install, self._discard) if self.group_commit else None
        )
        self._scan()

    def close(self) -> None:
        """Release the data dir (a process exit releases it too, even on SIGKILL)."""
        self._lock_file.close()

    # -- writes -----------------------------------------------------------------------------------

    def put(self, block_id: bytes, data: bytes | bytearray | memoryview, expected_fingerprint: str) -> bool:
        """Verify and durably store one block; False if it was already stored (nothing written).

        Raises ValueError (nothing written) unless `data` is exactly one intact block with id
        `block_id` and fingerprint `expected_fingerprint`, at most `max_block_bytes` long.
        """
        try:
            return self.put_many(expected_fingerprint, [(block_id, data)])[0]
        except BlockRejectedError as exc:
            raise exc.cause from None

    def put_many(
        self, fingerprint: str, blocks: Sequence[tuple[bytes, bytes | bytearray | memoryview]], first_index: int = 0
    ) -> list[bool]:
        """Verify and durably store blocks in order; per block, True if newly stored.

        Raises BlockRejectedError (index counted from `first_index`) at the first bad block, after
        the blocks before it are durable.
        """
        stored, rejected = self.write(fingerprint, blocks, first_index)
        if rejected is not None:
            raise rejected
        return stored

    def write(
        self,
        fingerprint: str,
        blocks: Sequence[tuple[bytes, bytes | bytearray | memoryview]],
        first_index: int = 0,
        verified: bool = False,
        reserved: Mapping[bytes, int] | None = None,
    ) -> tuple[list[bool], BlockRejectedError | None]:
        """`put_many` that returns the rejection (with what was stored before it) instead of raising
        it. `verified=True` skips verification the caller has just done. With `reserved` (id ->
        size, added by `reserve`), only those blocks are written, each one's reservation turning
        into stored bytes as it lands; what is left is released before returning, whatever happens."""
        if not fingerprint:
            raise ValueError("model fingerprint must not be empty")
        staged: list[tuple[int, Staged]] = []
        seen: set[bytes] = set()
        rejected: BlockRejectedError | None = None
        try:
            for i, (block_id, data) in enumerate(blocks):
                block_id = bytes(block_id)
                try:
                    # A bad buffer is rejected even when its id is stored: the caller has a bug.
                    if not verified:
                        verify_block(block_id, data, fingerprint, self.max_block_bytes)
                except ValueError as exc:
                    rejected = BlockRejectedError(first_index + i, block_id, exc)
                    break
                if block_id in seen or self.contains(block_id) or (reserved is not None and block_id not in reserved):
                    continue
                seen.add(block_id)
                staged.append((i, self._stage(block_id, data, reserved is not None)))
            self._commit([item for _, item in staged])
        except BaseException:
            for _, item in staged:
                if item.stored is None:
                    self._discard(item)
            raise
        finally:
            if reserved:
                landed = {item.block_id for _, item in staged if item.stored}
                self.release(sum(size for b, size in reserved.items() if b not in landed))
        stored = [False] * len(blocks)
        for i, item in staged:
            stored[i] = bool(item.stored)
        return stored, rejected

    def delete(self, block_id: bytes, durable: bool = True) -> bool:
        """Remove a stored block; False if it was not stored.

        With `durable=False` the removal may be undone by a crash (fine for eviction: the block
        comes back intact); `sync_deletes` makes a batch of such removals durable.
        """
        block_id = bytes(block_id)
        with self._lock:
            size = self._index.pop(block_id, None)
            if size is None:
                return False
            self._bytes -= size
            try:
                os.unlink(self._path_str(block_id))
            except FileNotFoundError:
                pass
            self._diffs.discard(block_id)
        if durable:
            self._fsync_dir(self._path(block_id).parent)
        return True

    def reserve(self, nbytes: int) -> None:
        """Count `nbytes` about to be written (see `write(reserved=...)`) in `committed_bytes`."""
        with self._lock:
            self._reserved += nbytes

    def release(self, nbytes: int) -> None:
        with self._lock:
            self._reserved -= nbytes

    def committed_bytes(self) -> tuple[int, int]:
        """(bytes stored, bytes reserved for writes in flight): their sum bounds the bytes on disk."""
        with self._lock:
            return self._bytes, self._reserved

    def disk_bytes(self) -> int:
        """Bytes of every file under the blocks dir, temp files included, walked with installs and
        deletes held still (a check for tests and soaks; it costs a directory walk)."""
        total = 0
        with self._lock:
            for dirpath, _, names in os.walk(self._root):
                for name in names:
                    try:
                        total += os.stat(os.path.join(dirpath, name)).st_size
                    except FileNotFoundError:  # a temp file discarded by its writer meanwhile
                        pass
        return total

    def sync_deletes(self, block_ids: Sequence[bytes]) -> None:
        for directory in {self._path(bytes(b)).parent for b in block_ids}:
            self._fsync_dir(directory)

    # -- reads ------------------------------------------------------------------------------------

    @overload
    def read(
        self,
        block_id: bytes,
        expected_fingerprint: str | None = None,
        layers: Layers = None,
        nowait: Literal[False] = False,
    ) -> BlockRead | None: ...

    @overload
    def read(
        self, block_id: bytes, expected_fingerprint: str | None = None, layers: Layers = None, nowait: bool = False
    ) -> BlockRead | None | NotCached: ...

    def read(
        self, block_id: bytes, expected_fingerprint: str | None = None, layers: Layers = None, nowait: bool = False
    ) -> BlockRead | None | NotCached:
        """The whole block or `layers` of it, verified; None if absent or found corrupt (then deleted).

        Raises FingerprintMismatchError if the block belongs to another model than
        `expected_fingerprint`, LayerRangeError if it has no such layers (the block is kept).
        With `nowait`, returns NOT_CACHED (counting nothing) instead of waiting for the disk.
        """
        block_id = bytes(block_id)
        if len(block_id) != BLOCK_ID_BYTES or not self.contains(block_id):
            self._miss()
            return None
        try:
            fd = os.open(self._path_str(block_id), os.O_RDONLY | os.O_CLOEXEC)
        except FileNotFoundError:
            # Deleted by a concurrent get/delete after our index check.
            with self._lock:
                if not self._path(block_id).exists():  # unless a concurrent put stored it again
                    self._bytes -= self._index.pop(block_id, 0)
            self._miss()
            return None
        try:
            st = os.fstat(fd)
            if wants_whole(layers):
                data, header = read_whole(fd, st.st_size, block_id, expected_fingerprint, self.max_block_bytes, nowait)
                hsize, layers = header.payload_offset, range(header.num_layers)
            else:
                data, hsize, header, layers = read_layers(
                    fd, st.st_size, block_id, expected_fingerprint, layers, nowait
                )
        except WouldBlock:
            return NOT_CACHED
        except (FingerprintMismatchError, LayerRangeError):
            raise
        except ValueError as exc:
            self._drop_corrupt(block_id, st.st_ino, exc)
            self._miss()
            return None
        finally:
            os.close(fd)
        with self._lock:
            self._hits += 1
        return BlockRead(block_id, data, hsize, layers, header.num_layers, Tier.SSD, header)

    def prefetch(self, block_ids: Sequence[bytes]) -> None:
        """Start reading the files of stored `block_ids` into the page cache, without waiting.

        Advice only (readahead): a reader that knows which blocks come next calls it so the disk
        works on them, many at once, while it sends the ones before. Nothing is verified or
        counted here; the reads that follow do that. Absent ids are skipped.
        """
        for block_id in block_ids:
            try:
                fd = os.open(self._path_str(bytes(block_id)), os.O_RDONLY | os.O_CLOEXEC)
            except OSError:  # not stored (any more)
                continue
            try:
                os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_WILLNEED)
            except OSError:
                pass
            finally:
                os.close(fd)

    def header(self, block_id: bytes) -> BlockHeader | None:
        """The stored block's verified header (one small read), None if not stored or unreadable.
        Its payload is not verified: a reader of the block still is."""
        try:
            fd = os.open(self._path_str(bytes(block_id)), os.O_RDONLY | os.O_CLOEXEC)
        except OSError:
            return None
        try:
            return read_head(fd, os.fstat(fd).st_size)
        except ValueError:
            return None
        finally:
            os.close(fd)

    def is_diff(self, block_id: bytes) -> bool:
        with self._lock:
            return bytes(block_id) in self._diffs

    def scanned_masters(self) -> dict[bytes, bytes]:
        """Each diff block found by the start-up scan -> its master id (once; then forgotten)."""
        with self._lock:
            found, self._scanned_masters = self._scanned_masters, {}
            return {d: m for d, m in found.items() if d in self._index}

    def get(self, block_id: bytes, expected_fingerprint: str | None = None) -> bytes | None:
        """The whole stored block, verified; None if absent or found corrupt (then deleted)."""
        read = self.read(block_id, expected_fingerprint)
        return None if read is None else bytes(read.data)  # no copy: a waiting read's data is bytes

    def contains(self, block_id: bytes) -> bool:
        with self._lock:
            return bytes(block_id) in self._index

    def size_of(self, block_id: bytes) -> int | None:
        with self._lock:
            return self._index.get(block_id)

    def lookup(self, block_ids: Sequence[bytes]) -> int:
        """How many leading ids of `block_ids` are stored (from the index; no disk IO)."""
        with self._lock:
            for n, block_id in enumerate(block_ids):
                if bytes(block_id) not in self._index:
                    return n
            return len(block_ids)

    def scanned_oldest_first(self) -> list[bytes]:
        """Ids found by the start-up scan, least recently written first (once; then forgotten)."""
        with self._lock:
            mtimes, self._mtimes = self._mtimes, {}
            return [b for b in sorted(mtimes, key=mtimes.__getitem__) if b in self._index]

    def stats(self) -> SsdStats:
        with self._lock:
            return SsdStats(
                blocks=len(self._index),
                bytes=self._bytes,
                hits=self._hits,
                misses=self._misses,
                corrupt_dropped=self._corrupt,
            )

    # -- internals --------------------------------------------------------------------------------

    def _path(self, block_id: bytes) -> Path:
        return Path(self._path_str(block_id))

    def _path_str(self, block_id: bytes) -> str:
        name = block_id.hex()  # plain strings: pathlib costs more than the syscalls on this path
        return f"{self._root}/{name[:2]}/{name}{DIFF_SUFFIX if block_id in self._diffs else BLOCK_SUFFIX}"

    def _stage(self, block_id: bytes, data: bytes | bytearray | memoryview, reserved: bool = False) -> Staged:
        """Write a temp file next to the block's final path (synced unless group commit syncs)."""
        name = block_id.hex()
        directory = f"{self._root}/{name[:2]}"
        self._ensure_dir(directory, name[:2])
        path = f"{directory}/{name}{DIFF_SUFFIX if is_diff_buffer(data) else BLOCK_SUFFIX}"
        tmp = f"{directory}/.{name}.{os.getpid()}-{next(self._seq)}{TEMP_SUFFIX}"
        view = memoryview(data).cast("B")
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o644)
        try:
            written = 0
            while written < len(view):
                written += os.write(fd, view[written:])
            if self.fsync and not self.group_commit:
                os.fsync(fd)
        except BaseException:
            os.close(fd)
            os.unlink(tmp)
            raise
        os.close(fd)
        return Staged(block_id, tmp, path, len(view), reserved)

    def _commit(self, items: list[Staged]) -> None:
        if not items:
            return
        if self._committer is not None:
            self._committer.commit(items)
            return
        for item in items:
            self._install(item)
        for directory in {os.path.dirname(item.path) for item in items}:
            self._fsync_dir(Path(directory))

    def _install(self, item: Staged) -> None:
        """Rename a durable temp file into place (under the lock, so index and directory agree)."""
        with self._lock:
            if item.block_id in self._index:  # a concurrent put of the same block won the race
                os.unlink(item.tmp)
                item.stored = False
                return
            os.replace(item.tmp, item.path)
            self._index[item.block_id] = item.size
            if item.path.endswith(DIFF_SUFFIX):
                self._diffs.add(item.block_id)
            self._bytes += item.size
            if item.reserved:  # its reservation becomes stored bytes in the same step
                self._reserved -= item.size
            item.stored = True

    def _discard(self, item: Staged) -> None:
        Path(item.tmp).unlink(missing_ok=True)

    def _miss(self) -> None:
        with self._lock:
            self._misses += 1

    def _drop_corrupt(self, block_id: bytes, inode: int, reason: Exception) -> None:
        path = self._path(block_id)
        with self._lock:
            try:
                if path.stat().st_ino != inode:
                    return  # evicted and stored again since we opened it: the new file is not ours to judge
            except FileNotFoundError:
                pass
            # Only the thread that removes the entry deletes and counts, so concurrent readers of one
            # corrupt block count it once.
            size = self._index.pop(block_id, None)
            if size is None:
                return
            self._bytes -= size
            self._corrupt += 1
            path.unlink(missing_ok=True)
            self._diffs.discard(block_id)
        log.warning("dropped corrupt block %s: %s", block_id.hex(), reason)

    def _ensure_dir(self, directory: str, name: str) -> None:
        if name in self._made_dirs:
            return
        os.makedirs(directory, exist_ok=True)
        # The new directory's own entry must be durable, or a crash could lose every block in it
        # (group commit's filesystem sync covers it).
        if not self.group_commit:
            self._fsync_dir(self.root)
        self._made_dirs.add(name)

    def _fsync_dir(self, directory: Path) -> None:
        if not self.fsync:
            return
        fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)

    def _scan(self) -> None:
        """Rebuild the index from the directory; remove temp files of interrupted puts."""
        found = scan_blocks(self.root)
        self._made_dirs.update(found.shards)
        self._diffs = found.diffs
        for block_id, (size, mtime_ns) in found.blocks.items():
            self._index[block_id] = size
            self._mtimes[block_id] = mtime_ns
            self._bytes += size
        for block_id in list(found.diffs):
            header = self.header(block_id)
            if header is None or header.diff is None:  # its reader would drop it: do it now, counted
                self._drop_corrupt(block_id, os.stat(self._path_str(block_id)).st_ino, ValueError("unreadable diff"))
                continue
            self._scanned_masters[block_id] = header.diff.master_id
        if found.temps_removed:
            log.info("removed %d temp files of interrupted puts", found.temps_removed)
        log.info("SSD tier %s: %d blocks, %d bytes", self.root, len(self._index), self._bytes)
