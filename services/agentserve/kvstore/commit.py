"""Group commit: many writers' staged blocks made durable by one shared pair of filesystem syncs.

With a file per block, per-write durability costs two fsyncs per block (the file, then its
directory after the rename). Group commit instead lets writers stage temp files without syncing;
whichever writer finds no commit running becomes the leader and, for everything staged so far,
runs `sync()` (temp data durable), installs each block (atomic rename into place) and runs
`sync()` again (the renames durable) before waking every writer whose blocks it committed.
Writers arriving during a commit queue up for the next one, so the batch grows with the load.
"""

from __future__ import annotations

import ctypes
import errno
import os
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field


@dataclass(eq=False)
class Staged:
    """One block written to a temp file in its final directory, waiting to be installed."""

    block_id: bytes
    tmp: str
    path: str
    size: int
    reserved: bool = False  # its bytes were reserved: installing it turns them into stored bytes
    stored: bool | None = None  # set when installed: False if the block was already there
    error: BaseException | None = field(default=None, repr=False)

    @property
    def done(self) -> bool:
        return self.stored is not None or self.error is not None


class GroupCommitter:
    def __init__(
        self, sync: Callable[[], None], install: Callable[[Staged], None], discard: Callable[[Staged], None]
    ) -> None:
        self._sync = sync
        self._install = install
        self._discard = discard
        self._cv = threading.Condition()
        self._queue: list[Staged] = []
        self._leading = False

    def commit(self, items: Sequence[Staged]) -> None:
        """Return once every item is durable and installed; raise the first item's error if any."""
        with self._cv:
            self._queue.extend(items)
            while not all(item.done for item in items):
                if self._leading:
                    self._cv.wait()
                    continue
                self._leading = True
                batch, self._queue = self._queue, []
                self._cv.release()
                try:
                    self._run(batch)
                finally:
                    self._cv.acquire()
                    self._leading = False
                    self._cv.notify_all()
        for item in items:
            if item.error is not None:
                raise item.error

    def _run(self, batch: list[Staged]) -> None:
        try:
            self._sync()
            for item in batch:
                self._install(item)
            self._sync()
        except BaseException as exc:  # noqa: BLE001 - handed to every writer in the batch
            for item in batch:
                if item.stored is None:
                    self._discard(item)
                item.error = exc
                item.stored = None


def make_syncfs(path: str | os.PathLike) -> Callable[[], None]:
    """A callable flushing the whole filesystem holding `path` (Linux syncfs), else `os.sync`."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        syncfs = libc.syncfs
    except (OSError, AttributeError):
        return os.sync
    fspath = os.fspath(path)

    def sync() -> None:
        fd = os.open(fspath, os.O_RDONLY | os.O_DIRECTORY)
        try:
            if syncfs(fd) != 0:
                err = ctypes.get_errno() or errno.EIO
                raise OSError(err, f"syncfs({fspath}): {os.strerror(err)}")
        finally:
            os.close(fd)

    return sync
