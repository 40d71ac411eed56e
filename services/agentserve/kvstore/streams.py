"""Streams of block reads and writes over a `KVStore`: one implementation for in-process callers
and for the gRPC servicer's Read, Get and Write.

Disk IO on an event loop runs in worker threads (`asyncio.to_thread`), so a slow fsync or a cold
read never stalls other RPCs. Reads DRAM or the page cache can serve without waiting are the
exception: they run in place, since handing a warm 1 MB block to a thread and back costs more than
reading it (a gRPC read stream serves warm blocks markedly faster in place). A stream of whole
blocks also keeps the disk busy with the blocks after the one it serves (`ReadAhead`), so cold
blocks mostly arrive in the page cache before their turn and are served in place too. There is no
reader thread one batch ahead of the sender: its GIL hand-offs cost more than the overlap gains.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterable, AsyncIterator, Callable, Iterator, Sequence
from typing import TYPE_CHECKING

from agentserve.kvstore.blockfile import LayerRangeError, Layers, wants_whole
from agentserve.kvstore.readahead import ReadAhead
from agentserve.kvstore.types import NOT_CACHED, BlockRead, NotCached, WriteResult

if TYPE_CHECKING:
    from agentserve.kvstore.store import KVStore

READ_BATCH_BYTES = 4 << 20  # on an event loop, a worker thread reads cold blocks until it has this much
WRITE_BATCH_BLOCKS = 64  # a write stream is committed in batches of this many blocks or bytes
WRITE_BATCH_BYTES = 32 << 20

WriteBatchCallback = Callable[[WriteResult], None]


class ReadStream:
    """`KVStore.read` of each id in order, ending at the first one not stored (then `missed` is
    True), with the blocks after the one being read on their way from disk (whole-block reads).

    Iterate it once: with `for` every read blocks (in process, or in a worker thread); with
    `async for` on an event loop, warm blocks are read in place, cold ones a batch at a time in a
    worker thread, and read-ahead advice is given from a worker thread without waiting for it.
    """

    def __init__(
        self, store: KVStore, block_ids: Sequence[bytes], fingerprint: str | None, layers: Layers, read_ahead_bytes: int
    ) -> None:
        if layers is not None and layers.stop is not None and layers.stop <= (layers.start or 0):
            raise LayerRangeError(f"layer range [{layers.start or 0}, {layers.stop}) is empty")
        self._store = store
        self._ids = [bytes(b) for b in block_ids]
        self._fingerprint = fingerprint
        self._layers = layers
        self._ahead = ReadAhead(self._ids, store.size_of, read_ahead_bytes) if wants_whole(layers) else None
        self._next = 0  # the first id not read yet
        self.missed = False

    def __iter__(self) -> Iterator[BlockRead]:
        while self._next < len(self._ids):
            if advice := self._advice():
                self._store.prefetch(advice)
            read = self._read_next()
            if isinstance(read, BlockRead):  # else None: not stored, the stream's end
                yield read

    async def __aiter__(self) -> AsyncIterator[BlockRead]:
        while self._next < len(self._ids):
            if advice := self._advice():
                future = asyncio.get_running_loop().run_in_executor(None, self._store.prefetch, advice)
                # Advice that fails or comes late costs nothing but speed: never waited for.
                future.add_done_callback(lambda f: f.cancelled() or f.exception())
            read = self._read_next(nowait=True)
            if read is None:
                return
            for item in [read] if read is not NOT_CACHED else await asyncio.to_thread(self._read_batch):
                if isinstance(item, Exception):
                    raise item
                yield item

    def _advice(self) -> list[bytes]:
        return self._ahead.advance(self._next) if self._ahead is not None else []

    def _read_next(self, nowait: bool = False) -> BlockRead | None | NotCached:
        read = self._store.read(self._ids[self._next], self._fingerprint, self._layers, nowait)
        if read is None:
            self.missed, self._next = True, len(self._ids)
        elif read is not NOT_CACHED:
            self._next += 1
        return read

    def _read_batch(self) -> list[BlockRead | Exception]:
        """Read on until READ_BATCH_BYTES are read, the stream ends or a read fails (the error,
        last, raised after the blocks before it are sent): one thread hop per batch, not per block."""
        batch: list[BlockRead | Exception] = []
        nbytes = 0
        while self._next < len(self._ids) and nbytes < READ_BATCH_BYTES:
            try:
                read = self._read_next()
            except Exception as exc:  # noqa: BLE001 - raised in order, after the blocks before it
                batch.append(exc)
                break
            if isinstance(read, BlockRead):
                batch.append(read)
                nbytes += len(read.data)
        return batch


async def write_stream(
    store: KVStore, blocks: AsyncIterable[tuple[str, bytes, bytes]], on_batch: WriteBatchCallback | None = None
) -> WriteResult:
    """Durably store `(fingerprint, block_id, data)` in order as they arrive; an empty fingerprint
    is the stream's (the first block's). Each batch (WRITE_BATCH_BLOCKS or WRITE_BATCH_BYTES) is
    committed in a worker thread while the next one arrives, and `on_batch` sees its result.

    Raises ValueError for a fingerprint other than the stream's, BlockRejectedError (indexed in
    the stream) at the first bad block, after the blocks before it are durable.
    """

    async def commit(fingerprint: str, batch: list[tuple[bytes, bytes]], first_index: int) -> WriteResult:
        result = await asyncio.to_thread(store.put_many, fingerprint, batch, first_index)
        if on_batch is not None:
            on_batch(result)
        return result

    fingerprint, result, index = "", WriteResult(), 0
    batch: list[tuple[bytes, bytes]] = []
    batch_bytes = 0
    committing: asyncio.Task | None = None  # the previous batch, committed while this one arrives
    try:
        async for block_fingerprint, block_id, data in blocks:
            if block_fingerprint and fingerprint and block_fingerprint != fingerprint:
                raise ValueError(
                    f"block {index}: model_fingerprint {block_fingerprint!r} differs from the stream's {fingerprint!r}"
                )
            fingerprint = fingerprint or block_fingerprint
            batch.append((block_id, data))
            batch_bytes += len(data)
            index += 1
            if len(batch) >= WRITE_BATCH_BLOCKS or batch_bytes >= WRITE_BATCH_BYTES:
                if committing is not None:
                    result += await committing
                committing = asyncio.create_task(commit(fingerprint, batch, index - len(batch)))
                batch, batch_bytes = [], 0
        if committing is not None:
            result, committing = result + await committing, None
        if batch:
            result += await commit(fingerprint, batch, index - len(batch))
    finally:
        if committing is not None:  # the stream failed: let the batch finish, unobserved
            committing.add_done_callback(lambda t: t.cancelled() or t.exception())
    return result
