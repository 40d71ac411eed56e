"""gRPC face of the block store: protobuf in, `BlockStore` calls, protobuf out.

Disk IO runs in worker threads (`asyncio.to_thread`) so a slow fsync never stalls other RPCs on
the event loop.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Sequence

import grpc
from opentelemetry import propagate

from agentserve.common.errors import grpc_errors
from agentserve.common.telemetry import incoming_context, tracer
from agentserve.kvstore.metrics import KVStoreMetrics
from agentserve.kvstore.store import BlockStore
from agentserve.v1 import common_pb2, kvstore_pb2, kvstore_pb2_grpc


class KVStoreServicer(kvstore_pb2_grpc.KVStoreServicer):
    def __init__(self, store: BlockStore, metrics: KVStoreMetrics) -> None:
        self._store = store
        self._metrics = metrics

    @grpc_errors
    async def Put(self, request: kvstore_pb2.PutRequest, context: grpc.aio.ServicerContext) -> kvstore_pb2.PutResponse:
        fingerprint = _require_fingerprint(request.model_fingerprint)
        with incoming_context(context), tracer().start_as_current_span("kvstore.put") as span:
            span.set_attribute("kv.blocks", len(request.blocks))
            response = await asyncio.to_thread(self._put_all, fingerprint, request.blocks)
            span.set_attribute("kv.bytes", response.bytes_written)
        return response

    @grpc_errors
    async def Get(self, request: kvstore_pb2.GetRequest,
                  context: grpc.aio.ServicerContext) -> AsyncIterator[common_pb2.KVBlock]:
        fingerprint = _require_fingerprint(request.model_fingerprint)
        # The span is not made current: attaching a context across yields would leave it dangling
        # if the client cancels the stream and the generator is closed elsewhere.
        parent = propagate.extract(dict(context.invocation_metadata() or ()))
        span = tracer().start_span("kvstore.get", context=parent)
        sent = nbytes = 0
        try:
            for block_id in request.block_ids:
                data = await asyncio.to_thread(self._store.get, block_id, fingerprint)
                if data is None:
                    self._metrics.get_blocks.labels("miss").inc()
                    break
                self._metrics.get_blocks.labels("hit").inc()
                self._metrics.get_bytes.inc(len(data))
                sent, nbytes = sent + 1, nbytes + len(data)
                yield common_pb2.KVBlock(block_id=block_id, data=data)
        finally:
            span.set_attribute("kv.blocks", sent)
            span.set_attribute("kv.bytes", nbytes)
            span.end()

    @grpc_errors
    async def Lookup(self, request: kvstore_pb2.LookupRequest,
                     context: grpc.aio.ServicerContext) -> kvstore_pb2.LookupResponse:
        # Index only, no disk IO: cheap enough to run on the event loop.
        return kvstore_pb2.LookupResponse(prefix_blocks=self._store.lookup(request.block_ids))

    @grpc_errors
    async def Stats(self, request: kvstore_pb2.StatsRequest,
                    context: grpc.aio.ServicerContext) -> kvstore_pb2.StatsResponse:
        s = self._store.stats()
        return kvstore_pb2.StatsResponse(blocks=s.blocks, bytes=s.bytes, hits=s.hits, misses=s.misses,
                                         corrupt_dropped=s.corrupt_dropped)

    def _put_all(self, fingerprint: str, blocks: Sequence[common_pb2.KVBlock]) -> kvstore_pb2.PutResponse:
        response = kvstore_pb2.PutResponse()
        for i, block in enumerate(blocks):
            try:
                stored = self._store.put(block.block_id, block.data, fingerprint)
            except ValueError as exc:
                self._metrics.put_blocks.labels("rejected").inc()
                raise ValueError(f"block {i} of {len(blocks)} (id {block.block_id[:16].hex()}) rejected: "
                                 f"{exc}; blocks before it are stored") from None
            if stored:
                response.stored += 1
                response.bytes_written += len(block.data)
                self._metrics.put_blocks.labels("stored").inc()
                self._metrics.put_bytes.inc(len(block.data))
            else:
                response.existing += 1
                self._metrics.put_blocks.labels("existing").inc()
        return response


def _require_fingerprint(fingerprint: str) -> str:
    if not fingerprint:
        raise ValueError("model_fingerprint must not be empty")
    return fingerprint
