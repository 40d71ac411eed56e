"""Read-ahead for a stream of block reads: which blocks to ask the disk for before they are due."""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Sequence

# What a stream of whole blocks keeps on its way from disk: deep enough that several streams of
# 1 MB blocks read cold blocks near the disk's sequential rate, where a window of a few MB only
# matches plain 1 MB reads from as many threads. It bounds page cache, not process memory.
READ_AHEAD_BYTES = 32 << 20


class ReadAhead:
    """Keeps the blocks within `window_bytes` after the one being served on their way from disk.

    A Read or Get stream knows every id it will serve. Advising the kernel to read the next ones
    (`KVStore.prefetch`) lets the device work on several blocks at once while the stream sends
    the ones before, so a cold block is mostly in the page cache by the time it is served. The
    window bounds the page cache one stream fills ahead of its reader; it is refilled half a
    window at a time, so a stream of 1 MB blocks makes one prefetch call per ~4 blocks.
    """

    def __init__(self, block_ids: Sequence[bytes], size_of: Callable[[bytes], int | None], window_bytes: int) -> None:
        if window_bytes <= 0:
            raise ValueError(f"window_bytes must be positive, got {window_bytes}")
        self._ids = block_ids
        self._size_of = size_of
        self._window = window_bytes
        self._refill = window_bytes // 2
        self._next = 0  # the first id not advised yet
        self._advised: deque[tuple[int, int]] = deque()  # (index, size) advised and not yet served
        self._ahead = 0  # their bytes

    def advance(self, served: int) -> list[bytes]:
        """The ids to prefetch now that the first `served` blocks are read; empty while more than
        half the window is still ahead, or every id was advised. An id not stored ends the
        read-ahead (as it ends the stream)."""
        while self._advised and self._advised[0][0] < served:
            self._ahead -= self._advised.popleft()[1]
        out: list[bytes] = []
        if self._ahead > self._window - self._refill:
            return out  # refill in batches: each prefetch call costs a thread hop
        index = max(self._next, served)
        while index < len(self._ids) and self._ahead < self._window:
            size = self._size_of(self._ids[index])
            if size is None:
                index = len(self._ids)
                break
            out.append(self._ids[index])
            self._advised.append((index, size))
            self._ahead += size
            index += 1
        self._next = index
        return out
