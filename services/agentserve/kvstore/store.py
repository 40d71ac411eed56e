"""The durable block store: one verified file per KV block, keyed by chained block id.

Layout: `data_dir/blocks/<first 2 hex of id>/<id hex>.kv`, each file exactly one serialized block.
The two-hex fan-out keeps directories small enough for fast lookups on any filesystem.

Durability contract: `put` returns only after the block was verified, written to a temp file in
its final directory, fsynced, atomically renamed into place and the directory fsynced. A crash at
any point leaves either no file or the complete file, never a partial one under the final name;
interrupted temp files are removed at the next start.

One process owns a data dir (an exclusive lock file enforces it: a second owner would delete the
first one's in-flight temp files and serve from a stale index). The in-memory index (id -> size) is rebuilt from the directory at
start and is the only shared state, guarded by one lock; file IO runs outside the lock so puts and
gets of different blocks proceed in parallel threads.
"""

from __future__ import annotations

import fcntl
import logging
import os
import tempfile
import threading
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from agentserve.kv.block_format import FingerprintMismatchError
from agentserve.kv.block_hash import BLOCK_ID_BYTES
from agentserve.kvstore.verify import check_block_id, verify_block

log = logging.getLogger(__name__)

DEFAULT_MAX_BLOCK_BYTES = 64 << 20
BLOCK_SUFFIX = ".kv"
TEMP_SUFFIX = ".tmp"


@dataclass(frozen=True)
class StoreStats:
    blocks: int
    bytes: int
    hits: int
    misses: int
    corrupt_dropped: int


class BlockStore:
    def __init__(self, data_dir: str | os.PathLike, fsync: bool = True,
                 max_block_bytes: int = DEFAULT_MAX_BLOCK_BYTES) -> None:
        if max_block_bytes <= 0:
            raise ValueError(f"max_block_bytes must be positive, got {max_block_bytes}")
        self.root = Path(data_dir) / "blocks"
        self.fsync = fsync
        self.max_block_bytes = max_block_bytes
        self._lock = threading.Lock()
        self._index: dict[bytes, int] = {}
        self._bytes = 0
        self._hits = self._misses = self._corrupt = 0
        self._made_dirs: set[str] = set()
        self.root.mkdir(parents=True, exist_ok=True)
        self._fsync_dir(self.root.parent)
        self._lock_file = _lock_dir(Path(data_dir))
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
        block_id = bytes(block_id)
        if not expected_fingerprint:
            raise ValueError("model fingerprint must not be empty")
        # A bad buffer is rejected even when its id is stored: the caller has a bug either way.
        verify_block(block_id, data, expected_fingerprint, self.max_block_bytes)
        if self.contains(block_id):
            return False
        size = memoryview(data).nbytes
        path = self._path(block_id)
        self._ensure_dir(path.parent)
        fd, tmp = tempfile.mkstemp(prefix=f".{block_id.hex()}.", suffix=TEMP_SUFFIX, dir=path.parent)
        try:
            with os.fdopen(fd, "wb") as f:
                f.write(data)
                f.flush()
                if self.fsync:
                    os.fsync(f.fileno())
            os.replace(tmp, path)
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise
        self._fsync_dir(path.parent)
        with self._lock:
            if block_id in self._index:  # a concurrent put of the same block won the race
                return False
            self._index[block_id] = size
            self._bytes += size
        return True

    def delete(self, block_id: bytes) -> bool:
        """Remove a stored block; False if it was not stored."""
        block_id = bytes(block_id)
        with self._lock:
            size = self._index.pop(block_id, None)
            if size is None:
                return False
            self._bytes -= size
            self._path(block_id).unlink(missing_ok=True)
        self._fsync_dir(self._path(block_id).parent)
        return True

    # -- reads ------------------------------------------------------------------------------------

    def get(self, block_id: bytes, expected_fingerprint: str | None = None) -> bytes | None:
        """The stored bytes of a block, verified; None if absent or found corrupt (then deleted).

        Raises FingerprintMismatchError if the block belongs to another model than
        `expected_fingerprint` (the block is intact and kept: the caller asked with the wrong model).
        """
        block_id = bytes(block_id)
        if len(block_id) != BLOCK_ID_BYTES or not self.contains(block_id):
            return self._miss()
        try:
            data = self._path(block_id).read_bytes()
        except FileNotFoundError:
            # Deleted by a concurrent get/delete after our index check.
            with self._lock:
                if not self._path(block_id).exists():  # unless a concurrent put stored it again
                    self._bytes -= self._index.pop(block_id, 0)
            return self._miss()
        try:
            verify_block(block_id, data, expected_fingerprint, max(self.max_block_bytes, len(data)))
        except FingerprintMismatchError:
            raise
        except ValueError as exc:
            self._drop_corrupt(block_id, exc)
            return self._miss()
        with self._lock:
            self._hits += 1
        return data

    def contains(self, block_id: bytes) -> bool:
        with self._lock:
            return bytes(block_id) in self._index

    def lookup(self, block_ids: Sequence[bytes]) -> int:
        """How many leading ids of `block_ids` are stored (from the index; no disk IO)."""
        with self._lock:
            for n, block_id in enumerate(block_ids):
                if bytes(block_id) not in self._index:
                    return n
            return len(block_ids)

    def stats(self) -> StoreStats:
        with self._lock:
            return StoreStats(blocks=len(self._index), bytes=self._bytes, hits=self._hits,
                              misses=self._misses, corrupt_dropped=self._corrupt)

    # -- internals --------------------------------------------------------------------------------

    def _path(self, block_id: bytes) -> Path:
        name = block_id.hex()
        return self.root / name[:2] / (name + BLOCK_SUFFIX)

    def _miss(self) -> None:
        with self._lock:
            self._misses += 1
        return None

    def _drop_corrupt(self, block_id: bytes, reason: Exception) -> None:
        with self._lock:
            # Only the thread that removes the entry deletes and counts, so concurrent readers of one
            # corrupt block count it once.
            size = self._index.pop(block_id, None)
            if size is None:
                return
            self._bytes -= size
            self._corrupt += 1
            self._path(block_id).unlink(missing_ok=True)
        log.warning("dropped corrupt block %s: %s", block_id.hex(), reason)

    def _ensure_dir(self, directory: Path) -> None:
        if directory.name in self._made_dirs:
            return
        directory.mkdir(exist_ok=True)
        # The new directory's own entry must be durable, or a crash could lose every block in it.
        self._fsync_dir(directory.parent)
        self._made_dirs.add(directory.name)

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
        removed = 0
        for shard in self.root.iterdir():
            if not shard.is_dir():
                continue
            self._made_dirs.add(shard.name)
            for entry in os.scandir(shard):
                if entry.name.endswith(TEMP_SUFFIX):
                    os.unlink(entry.path)
                    removed += 1
                    continue
                block_id = _parse_name(entry.name)
                if block_id is None or not entry.is_file():
                    log.warning("ignoring unexpected file %s", entry.path)
                    continue
                size = entry.stat().st_size
                self._index[block_id] = size
                self._bytes += size
        if removed:
            log.info("removed %d temp files of interrupted puts", removed)
        log.info("block store %s: %d blocks, %d bytes", self.root, len(self._index), self._bytes)


def _parse_name(name: str) -> bytes | None:
    if not name.endswith(BLOCK_SUFFIX):
        return None
    try:
        block_id = bytes.fromhex(name[:-len(BLOCK_SUFFIX)])
        check_block_id(block_id)
    except ValueError:
        return None
    return block_id


def _lock_dir(data_dir: Path):
    lock_file = open(data_dir / "LOCK", "a")  # noqa: SIM115 - held open for the store's lifetime
    try:
        fcntl.flock(lock_file, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        lock_file.close()
        raise RuntimeError(f"data dir {data_dir} is in use by another block store") from None
    return lock_file
