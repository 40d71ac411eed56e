"""Async client of one kvstore, used by engines (read hits, persist blocks) and the scheduler (lookup,
pins). `sharded.ShardedKVStoreClient` has the same methods over several kvstores.

Every call carries the caller's trace context (the channel's interceptors), so the store's spans
join the turn's trace. The channel is created on first use, inside the caller's event loop
(grpc.aio channels are bound to the loop they are created in).
"""

from __future__ import annotations

from collections.abc import AsyncGenerator, AsyncIterable, AsyncIterator, Iterable, Sequence
from dataclasses import dataclass

import grpc

from agentserve.common.channels import open_channel
from agentserve.fabric.malloc import keep_freed_buffers
from agentserve.kvstore import wire
from agentserve.kvstore.types import BlockRead, LookupResult, Tier
from agentserve.v1 import common_pb2, kvstore_pb2, kvstore_pb2_grpc

# `(block_id, data)` pairs, as a list or as an async iterator of blocks as they are made.
BlockSource = Iterable[tuple[bytes, bytes]] | AsyncIterable[tuple[bytes, bytes]]


@dataclass(frozen=True)
class _Stubs:
    """What a channel serves this client: made together on first use, closed together."""

    channel: grpc.aio.Channel
    kv: kvstore_pb2_grpc.KVStoreStub
    # The KV-carrying streams decode with `wire`: one copy of each block instead of three.
    read: grpc.aio.UnaryStreamMultiCallable
    get: grpc.aio.UnaryStreamMultiCallable


class KVStoreClient:
    def __init__(self, address: str, timeout_s: float | None = None) -> None:
        """`address` is host:port; `timeout_s` bounds each unary call and each whole Get stream."""
        self.address = address
        self.timeout_s = timeout_s
        self._stubs: _Stubs | None = None
        keep_freed_buffers()  # every block received is a fresh block-sized buffer

    async def put(self, fingerprint: str, blocks: Sequence[tuple[bytes, bytes]]) -> kvstore_pb2.PutResponse:
        """Durably store `(block_id, data)` pairs, each one serialized block of model `fingerprint`.

        Raises grpc.aio.AioRpcError INVALID_ARGUMENT naming the first bad block; those before it
        are stored.
        """
        request = kvstore_pb2.PutRequest(
            model_fingerprint=fingerprint,
            blocks=[common_pb2.KVBlock(block_id=bytes(block_id), data=bytes(data)) for block_id, data in blocks],
        )
        return await self._kv().Put(request, timeout=self.timeout_s)

    async def get(self, fingerprint: str, block_ids: Sequence[bytes]) -> AsyncGenerator[tuple[bytes, bytes], None]:
        """Yield `(block_id, data)` in request order, ending at the first block not stored."""
        request = kvstore_pb2.GetRequest(model_fingerprint=fingerprint, block_ids=[bytes(b) for b in block_ids])
        call = self._open().get(request, timeout=self.timeout_s)
        try:
            async for block_id, data in call:
                yield block_id, data
        finally:
            call.cancel()  # no-op when the stream ended; frees the server when the caller stops early

    async def write(self, fingerprint: str, blocks: BlockSource) -> kvstore_pb2.PutResponse:
        """Stream `(block_id, data)` pairs (a list, or an async iterator of blocks as they are made);
        returns once every block is durable. Errors as `put`, indexed by position in the stream."""

        async def messages() -> AsyncIterator[kvstore_pb2.WriteRequest]:
            first = True
            async for block_id, data in _aiter(blocks):
                yield kvstore_pb2.WriteRequest(
                    model_fingerprint=fingerprint if first else "",
                    block=common_pb2.KVBlock(block_id=bytes(block_id), data=bytes(data)),
                )
                first = False

        return await self._kv().Write(messages(), timeout=self.timeout_s)

    async def read(
        self, fingerprint: str, block_ids: Sequence[bytes], layers: range | None = None
    ) -> AsyncGenerator[BlockRead, None]:
        """Yield each block (or `layers` of it) in request order, ending at the first one not stored."""
        request = kvstore_pb2.ReadRequest(model_fingerprint=fingerprint, block_ids=[bytes(b) for b in block_ids])
        if layers is not None:
            request.layer_start, request.layer_stop = layers.start, layers.stop
        call = self._open().read(request, timeout=self.timeout_s)
        try:
            async for read in call:
                yield read
        finally:
            call.cancel()

    async def lookup(self, block_ids: Sequence[bytes]) -> int:
        """How many leading ids of the chained list `block_ids` are stored."""
        return (await self.lookup_tiers(block_ids)).prefix_blocks

    async def lookup_tiers(self, block_ids: Sequence[bytes]) -> LookupResult:
        """The stored prefix of `block_ids` and the tier (DRAM, SSD or NONE) of each id."""
        request = kvstore_pb2.LookupRequest(block_ids=[bytes(b) for b in block_ids])
        response = await self._kv().Lookup(request, timeout=self.timeout_s)
        tiers = tuple(Tier(t) for t in response.tiers)
        if len(tiers) != len(block_ids):  # a store from before tiers: it only knows the prefix
            tiers = (Tier.SSD,) * response.prefix_blocks + (Tier.NONE,) * (len(block_ids) - response.prefix_blocks)
        return LookupResult(response.prefix_blocks, tiers)

    async def pin(self, block_ids: Sequence[bytes], ttl_s: float) -> int:
        """Keep stored blocks from eviction for `ttl_s` seconds; returns how many are stored."""
        request = kvstore_pb2.PinRequest(block_ids=[bytes(b) for b in block_ids], ttl_s=ttl_s)
        return (await self._kv().Pin(request, timeout=self.timeout_s)).pinned

    async def unpin(self, block_ids: Sequence[bytes]) -> int:
        request = kvstore_pb2.UnpinRequest(block_ids=[bytes(b) for b in block_ids])
        return (await self._kv().Unpin(request, timeout=self.timeout_s)).unpinned

    async def hint(
        self, block_ids: Sequence[bytes], priority: int | None = None, next_use_in_s: float | None = None
    ) -> int:
        """Advise the eviction policy; returns how many ids are stored."""
        request = kvstore_pb2.HintRequest(
            block_ids=[bytes(b) for b in block_ids], priority=priority, next_use_in_s=next_use_in_s
        )
        return (await self._kv().Hint(request, timeout=self.timeout_s)).stored

    async def delete(self, block_ids: Sequence[bytes]) -> int:
        """Remove blocks from every tier; returns how many were stored."""
        request = kvstore_pb2.DeleteRequest(block_ids=[bytes(b) for b in block_ids])
        return (await self._kv().Delete(request, timeout=self.timeout_s)).deleted

    async def stats(self) -> kvstore_pb2.StatsResponse:
        return await self._kv().Stats(kvstore_pb2.StatsRequest(), timeout=self.timeout_s)

    async def close(self) -> None:
        if self._stubs is not None:
            await self._stubs.channel.close()
            self._stubs = None

    async def __aenter__(self) -> KVStoreClient:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.close()

    def _kv(self) -> kvstore_pb2_grpc.KVStoreStub:
        return self._open().kv

    def _open(self) -> _Stubs:
        if self._stubs is None:
            channel = open_channel(self.address)
            self._stubs = _Stubs(
                channel,
                kvstore_pb2_grpc.KVStoreStub(channel),
                read=channel.unary_stream(
                    wire.READ_METHOD, request_serializer=_serialize, response_deserializer=wire.decode_read_chunk
                ),
                get=channel.unary_stream(
                    wire.GET_METHOD, request_serializer=_serialize, response_deserializer=wire.decode_kv_block
                ),
            )
        return self._stubs


async def _aiter(items):
    if hasattr(items, "__aiter__"):
        async for item in items:
            yield item
    else:
        for item in items:
            yield item


def _serialize(message) -> bytes:
    return message.SerializeToString()
