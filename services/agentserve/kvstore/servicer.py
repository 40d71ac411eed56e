"""gRPC face of the block store: protobuf in, `KVStore` calls, protobuf out.

Register it with `wire.add_to_server`: Read and Get yield `BlockRead`s that `wire` encodes. How
reads and writes are streamed (read-ahead, warm reads in place, batches in worker threads) is the
store's (`kvstore.streams`); this class translates, and counts RPC outcomes for /metrics.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable

import grpc
from opentelemetry import propagate

from agentserve.common.telemetry import tracer
from agentserve.kv.block_hash import BLOCK_ID_BYTES, checked_block_ids
from agentserve.kvstore.metrics import KVStoreMetrics
from agentserve.kvstore.ssd import BlockRejectedError
from agentserve.kvstore.store import KVStore
from agentserve.kvstore.streams import ReadStream
from agentserve.kvstore.types import BlockRead, Tier, WriteResult
from agentserve.v1 import kvstore_pb2, kvstore_pb2_grpc

# Equal values (see `Tier`), but the protobuf stubs take the proto enum, not any int.
_PROTO_TIERS: dict[Tier, kvstore_pb2.Tier] = {
    Tier.NONE: kvstore_pb2.TIER_NONE,
    Tier.DRAM: kvstore_pb2.TIER_DRAM,
    Tier.SSD: kvstore_pb2.TIER_SSD,
}


class KVStoreServicer(kvstore_pb2_grpc.KVStoreServicer):
    def __init__(self, store: KVStore, metrics: KVStoreMetrics) -> None:
        self._store = store
        self._metrics = metrics

    async def Put(self, request: kvstore_pb2.PutRequest, context: grpc.aio.ServicerContext) -> kvstore_pb2.PutResponse:
        fingerprint = _require_fingerprint(request.model_fingerprint)
        with tracer().start_as_current_span("kvstore.put") as span:
            span.set_attribute("kv.blocks", len(request.blocks))
            blocks = [(b.block_id, b.data) for b in request.blocks]
            result = await self._counted(asyncio.to_thread(self._store.put_many, fingerprint, blocks), len(blocks))
            self._count_stored(result)
            span.set_attribute("kv.bytes", result.bytes_written)
        return _put_response(result)

    async def Write(
        self, request_iterator: AsyncIterator[kvstore_pb2.WriteRequest], context: grpc.aio.ServicerContext
    ) -> kvstore_pb2.PutResponse:
        with tracer().start_as_current_span("kvstore.write") as span:
            blocks = _write_blocks(request_iterator)
            result = await self._counted(self._store.write_stream(blocks, on_batch=self._count_stored))
            span.set_attribute("kv.blocks", result.stored + result.existing)
            span.set_attribute("kv.bytes", result.bytes_written)
        return _put_response(result)

    async def Get(self, request: kvstore_pb2.GetRequest, context: grpc.aio.ServicerContext) -> AsyncIterator[BlockRead]:
        fingerprint = _require_fingerprint(request.model_fingerprint)
        ids = [bytes(b) for b in request.block_ids]
        # Get predates id checks: a malformed id is a block not stored, where the reply stops.
        ids = ids[: next((i for i, b in enumerate(ids) if len(b) != BLOCK_ID_BYTES), len(ids))]
        async for read in self._reads("kvstore.get", context, self._store.read_stream(ids, fingerprint)):
            yield read  # encoded as a KVBlock by wire.encode_kv_block

    async def Read(
        self, request: kvstore_pb2.ReadRequest, context: grpc.aio.ServicerContext
    ) -> AsyncIterator[BlockRead]:
        fingerprint = _require_fingerprint(request.model_fingerprint)
        ids = checked_block_ids(request.block_ids)
        layers = slice(request.layer_start, request.layer_stop if request.HasField("layer_stop") else None)
        async for read in self._reads("kvstore.read", context, self._store.read_stream(ids, fingerprint, layers)):
            yield read  # encoded as a ReadChunk by wire.encode_read_chunk

    async def Lookup(
        self, request: kvstore_pb2.LookupRequest, context: grpc.aio.ServicerContext
    ) -> kvstore_pb2.LookupResponse:
        # Index only, no disk IO: cheap enough to run on the event loop.
        result = self._store.lookup(request.block_ids)
        return kvstore_pb2.LookupResponse(
            prefix_blocks=result.prefix_blocks, tiers=[_PROTO_TIERS[t] for t in result.tiers]
        )

    async def Pin(self, request: kvstore_pb2.PinRequest, context: grpc.aio.ServicerContext) -> kvstore_pb2.PinResponse:
        return kvstore_pb2.PinResponse(pinned=self._store.pin(request.block_ids, request.ttl_s))

    async def Unpin(
        self, request: kvstore_pb2.UnpinRequest, context: grpc.aio.ServicerContext
    ) -> kvstore_pb2.UnpinResponse:
        return kvstore_pb2.UnpinResponse(unpinned=self._store.unpin(request.block_ids))

    async def Hint(
        self, request: kvstore_pb2.HintRequest, context: grpc.aio.ServicerContext
    ) -> kvstore_pb2.HintResponse:
        hint = self._store.hint_from_now(
            priority=request.priority if request.HasField("priority") else None,
            next_use_in_s=request.next_use_in_s if request.HasField("next_use_in_s") else None,
        )
        return kvstore_pb2.HintResponse(stored=self._store.hint(request.block_ids, hint))

    async def Delete(
        self, request: kvstore_pb2.DeleteRequest, context: grpc.aio.ServicerContext
    ) -> kvstore_pb2.DeleteResponse:
        deleted = await asyncio.to_thread(self._store.delete, list(request.block_ids))
        return kvstore_pb2.DeleteResponse(deleted=deleted)

    async def Stats(
        self, request: kvstore_pb2.StatsRequest, context: grpc.aio.ServicerContext
    ) -> kvstore_pb2.StatsResponse:
        s = self._store.stats()
        tiers = [
            kvstore_pb2.TierStats(
                tier=_PROTO_TIERS[t.tier],
                blocks=t.blocks,
                bytes=t.bytes,
                budget_bytes=t.budget_bytes,
                hits=t.hits,
                misses=t.misses,
                evictions=t.evictions,
                peak_bytes=t.peak_bytes,
            )
            for t in (s.dram, s.ssd)
        ]
        return kvstore_pb2.StatsResponse(
            blocks=s.ssd.blocks,
            bytes=s.ssd.bytes,
            hits=s.dram.hits + s.ssd.hits,
            misses=s.ssd.misses,
            corrupt_dropped=s.corrupt_dropped,
            tiers=tiers,
            reserved_bytes=s.reserved_bytes,
            pinned_blocks=s.pinned_blocks,
            read_bytes=s.read_bytes,
            write_bytes=s.write_bytes,
            read_bytes_per_s=s.read_bytes_per_s,
            write_bytes_per_s=s.write_bytes_per_s,
        )

    async def _counted(self, write: Awaitable[WriteResult], total: int | None = None) -> WriteResult:
        """Await a write, counting a rejected block; the rejection names the request's `total` blocks."""
        try:
            return await write
        except BlockRejectedError as exc:
            self._metrics.put_blocks.labels("rejected").inc()
            if total is None:
                raise
            raise exc.of(total) from None

    def _count_stored(self, result: WriteResult) -> None:
        self._metrics.put_blocks.labels("stored").inc(result.stored)
        self._metrics.put_blocks.labels("existing").inc(result.existing)
        self._metrics.put_bytes.inc(result.bytes_written)

    async def _reads(
        self, name: str, context: grpc.aio.ServicerContext, stream: ReadStream
    ) -> AsyncIterator[BlockRead]:
        """The stream's reads, counted and traced."""
        # The span is not made current: attaching a context across yields would leave it dangling
        # if the client cancels the stream and the generator is closed elsewhere.
        parent = propagate.extract(dict(context.invocation_metadata() or ()))
        span = tracer().start_span(name, context=parent)
        sent = nbytes = 0
        try:
            async for read in stream:
                self._metrics.get_blocks.labels("hit").inc()
                self._metrics.get_bytes.inc(len(read.data))
                sent, nbytes = sent + 1, nbytes + len(read.data)
                yield read
            if stream.missed:
                self._metrics.get_blocks.labels("miss").inc()
        finally:
            span.set_attribute("kv.blocks", sent)
            span.set_attribute("kv.bytes", nbytes)
            span.end()


async def _write_blocks(
    requests: AsyncIterator[kvstore_pb2.WriteRequest],
) -> AsyncIterator[tuple[str, bytes, bytes]]:
    """A Write stream's messages as `(fingerprint, block_id, data)`; the first must name the model."""
    first = True
    async for message in requests:
        fingerprint = _require_fingerprint(message.model_fingerprint) if first else message.model_fingerprint
        first = False
        yield fingerprint, message.block.block_id, message.block.data


def _put_response(result: WriteResult) -> kvstore_pb2.PutResponse:
    return kvstore_pb2.PutResponse(stored=result.stored, existing=result.existing, bytes_written=result.bytes_written)


def _require_fingerprint(fingerprint: str) -> str:
    if not fingerprint:
        raise ValueError("model_fingerprint must not be empty")
    return fingerprint
