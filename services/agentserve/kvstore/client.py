"""Async client of the kvstore, used by engines (read hits, persist blocks) and the scheduler (lookup).

Every call carries the caller's trace context, so the store's spans join the turn's trace. The
channel is created on first use, inside the caller's event loop (grpc.aio channels are bound to
the loop they are created in).
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Sequence

import grpc

from agentserve.common.server import GRPC_OPTIONS
from agentserve.common.telemetry import outgoing_metadata
from agentserve.v1 import common_pb2, kvstore_pb2, kvstore_pb2_grpc


class KVStoreClient:
    def __init__(self, address: str, timeout_s: float | None = None) -> None:
        """`address` is host:port; `timeout_s` bounds each unary call and each whole Get stream."""
        self.address = address
        self.timeout_s = timeout_s
        self._channel: grpc.aio.Channel | None = None
        self._stub: kvstore_pb2_grpc.KVStoreStub | None = None

    async def put(self, fingerprint: str, blocks: Sequence[tuple[bytes, bytes]]) -> kvstore_pb2.PutResponse:
        """Durably store `(block_id, data)` pairs, each one serialized block of model `fingerprint`.

        Raises grpc.aio.AioRpcError INVALID_ARGUMENT naming the first bad block; those before it
        are stored.
        """
        request = kvstore_pb2.PutRequest(
            model_fingerprint=fingerprint,
            blocks=[common_pb2.KVBlock(block_id=bytes(block_id), data=bytes(data)) for block_id, data in blocks],
        )
        return await self._kv().Put(request, metadata=outgoing_metadata(), timeout=self.timeout_s)

    async def get(self, fingerprint: str, block_ids: Sequence[bytes]) -> AsyncIterator[tuple[bytes, bytes]]:
        """Yield `(block_id, data)` in request order, ending at the first block not stored."""
        request = kvstore_pb2.GetRequest(model_fingerprint=fingerprint, block_ids=[bytes(b) for b in block_ids])
        call = self._kv().Get(request, metadata=outgoing_metadata(), timeout=self.timeout_s)
        try:
            async for block in call:
                yield block.block_id, block.data
        finally:
            call.cancel()  # no-op when the stream ended; frees the server when the caller stops early

    async def lookup(self, block_ids: Sequence[bytes]) -> int:
        """How many leading ids of the chained list `block_ids` are stored."""
        request = kvstore_pb2.LookupRequest(block_ids=[bytes(b) for b in block_ids])
        response = await self._kv().Lookup(request, metadata=outgoing_metadata(), timeout=self.timeout_s)
        return response.prefix_blocks

    async def stats(self) -> kvstore_pb2.StatsResponse:
        return await self._kv().Stats(kvstore_pb2.StatsRequest(), metadata=outgoing_metadata(),
                                      timeout=self.timeout_s)

    async def close(self) -> None:
        if self._channel is not None:
            await self._channel.close()
            self._channel = self._stub = None

    async def __aenter__(self) -> KVStoreClient:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.close()

    def _kv(self) -> kvstore_pb2_grpc.KVStoreStub:
        if self._stub is None:
            self._channel = grpc.aio.insecure_channel(self.address, options=GRPC_OPTIONS)
            self._stub = kvstore_pb2_grpc.KVStoreStub(self._channel)
        return self._stub
