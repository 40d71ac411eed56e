"""Async client of one kvstore, used by engines (read hits, persist blocks) and the scheduler (lookup,
pins). `sharded.ShardedKVStoreClient` has the same methods over several kvstores.

Every call carries the caller's trace context (the channel's interceptors), so the store's spans
join the turn's trace. The channel is created on first use, inside the caller's event loop
(grpc.aio channels are bound to the loop they are created in).

A store that is down (`store_down`: UNAVAILABLE, DEADLINE_EXCEEDED) costs callers only what the
store's KV would have saved: they go on without it. A call that finds it UNAVAILABLE retires the
channel, so the first call after a restart dials afresh instead of waiting out the old channel's
reconnect backoff (which grows to minutes over a long outage).
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncGenerator, AsyncIterable, AsyncIterator, Awaitable, Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import TypeGuard, TypeVar

import grpc

from agentserve.common.channels import open_channel
from agentserve.common.internal_tls import InternalTLS
from agentserve.fabric.malloc import keep_freed_buffers
from agentserve.kvstore import wire
from agentserve.kvstore.types import BlockRead, LookupResult, Tier
from agentserve.v1 import common_pb2, kvstore_pb2, kvstore_pb2_grpc

T = TypeVar("T")

# What a store that is dead, restarting, unreachable or hung answers; not a bad request.
STORE_DOWN = frozenset({grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.DEADLINE_EXCEEDED})


def store_down(exc: BaseException) -> TypeGuard[grpc.aio.AioRpcError]:
    """Whether `exc` says the store is down (callers then do without it), not that a call was bad."""
    return isinstance(exc, grpc.aio.AioRpcError) and exc.code() in STORE_DOWN


# How long calls still on a retired channel may run before it is closed under them.
RETIRE_GRACE_S = 30.0

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
    def __init__(self, address: str, timeout_s: float | None = None, tls: InternalTLS | None = None) -> None:
        """`address` is host:port; `timeout_s` bounds each unary call and each whole Get stream;
        `tls`: the internal plane's credentials (None: plain)."""
        self.address = address
        self.timeout_s = timeout_s
        self.tls = tls
        self._stubs: _Stubs | None = None
        self._retiring: set[asyncio.Future[None]] = set()
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
        return await self._unary(lambda kv: kv.Put(request, timeout=self.timeout_s))

    async def get(self, fingerprint: str, block_ids: Sequence[bytes]) -> AsyncGenerator[tuple[bytes, bytes], None]:
        """Yield `(block_id, data)` in request order, ending at the first block not stored."""
        request = kvstore_pb2.GetRequest(model_fingerprint=fingerprint, block_ids=[bytes(b) for b in block_ids])
        stubs = self._open()
        call = stubs.get(request, timeout=self.timeout_s)
        try:
            async for block_id, data in call:
                yield block_id, data
        except grpc.aio.AioRpcError as exc:
            self._retire_if_unavailable(stubs, exc)
            raise
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

        return await self._unary(lambda kv: kv.Write(messages(), timeout=self.timeout_s))

    async def read(
        self, fingerprint: str, block_ids: Sequence[bytes], layers: range | None = None
    ) -> AsyncGenerator[BlockRead, None]:
        """Yield each block (or `layers` of it) in request order, ending at the first one not stored."""
        request = kvstore_pb2.ReadRequest(model_fingerprint=fingerprint, block_ids=[bytes(b) for b in block_ids])
        if layers is not None:
            request.layer_start, request.layer_stop = layers.start, layers.stop
        stubs = self._open()
        call = stubs.read(request, timeout=self.timeout_s)
        try:
            async for read in call:
                yield read
        except grpc.aio.AioRpcError as exc:
            self._retire_if_unavailable(stubs, exc)
            raise
        finally:
            call.cancel()

    async def lookup(self, block_ids: Sequence[bytes]) -> int:
        """How many leading ids of the chained list `block_ids` are stored."""
        return (await self.lookup_tiers(block_ids)).prefix_blocks

    async def lookup_tiers(self, block_ids: Sequence[bytes]) -> LookupResult:
        """The stored prefix of `block_ids` and the tier (DRAM, SSD or NONE) of each id."""
        request = kvstore_pb2.LookupRequest(block_ids=[bytes(b) for b in block_ids])
        response = await self._unary(lambda kv: kv.Lookup(request, timeout=self.timeout_s))
        tiers = tuple(Tier(t) for t in response.tiers)
        if len(tiers) != len(block_ids):  # a store from before tiers: it only knows the prefix
            tiers = (Tier.SSD,) * response.prefix_blocks + (Tier.NONE,) * (len(block_ids) - response.prefix_blocks)
        return LookupResult(response.prefix_blocks, tiers)

    async def pin(self, block_ids: Sequence[bytes], ttl_s: float) -> int:
        """Keep stored blocks from eviction for `ttl_s` seconds; returns how many are stored."""
        request = kvstore_pb2.PinRequest(block_ids=[bytes(b) for b in block_ids], ttl_s=ttl_s)
        return (await self._unary(lambda kv: kv.Pin(request, timeout=self.timeout_s))).pinned

    async def unpin(self, block_ids: Sequence[bytes]) -> int:
        request = kvstore_pb2.UnpinRequest(block_ids=[bytes(b) for b in block_ids])
        return (await self._unary(lambda kv: kv.Unpin(request, timeout=self.timeout_s))).unpinned

    async def hint(
        self, block_ids: Sequence[bytes], priority: int | None = None, next_use_in_s: float | None = None
    ) -> int:
        """Advise the eviction policy; returns how many ids are stored."""
        request = kvstore_pb2.HintRequest(
            block_ids=[bytes(b) for b in block_ids], priority=priority, next_use_in_s=next_use_in_s
        )
        return (await self._unary(lambda kv: kv.Hint(request, timeout=self.timeout_s))).stored

    async def delete(self, block_ids: Sequence[bytes]) -> int:
        """Remove blocks from every tier; returns how many were stored."""
        request = kvstore_pb2.DeleteRequest(block_ids=[bytes(b) for b in block_ids])
        return (await self._unary(lambda kv: kv.Delete(request, timeout=self.timeout_s))).deleted

    async def stats(self) -> kvstore_pb2.StatsResponse:
        return await self._unary(lambda kv: kv.Stats(kvstore_pb2.StatsRequest(), timeout=self.timeout_s))

    async def close(self) -> None:
        if self._stubs is not None:
            await self._stubs.channel.close()
            self._stubs = None
        if self._retiring:
            await asyncio.gather(*self._retiring)

    async def __aenter__(self) -> KVStoreClient:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.close()

    async def _unary(self, call: Callable[[kvstore_pb2_grpc.KVStoreStub], Awaitable[T]]) -> T:
        stubs = self._open()
        try:
            return await call(stubs.kv)
        except grpc.aio.AioRpcError as exc:
            self._retire_if_unavailable(stubs, exc)
            raise

    def _retire_if_unavailable(self, stubs: _Stubs, exc: grpc.aio.AioRpcError) -> None:
        """Stop using a channel that found the store UNAVAILABLE: the next call opens a fresh one.
        Calls still on the old one get `RETIRE_GRACE_S` to finish before it is closed (a long outage
        must not pile up channels, each reconnecting on its own)."""
        if exc.code() is grpc.StatusCode.UNAVAILABLE and self._stubs is stubs:
            self._stubs = None
            closing = asyncio.ensure_future(stubs.channel.close(grace=RETIRE_GRACE_S))
            self._retiring.add(closing)
            closing.add_done_callback(self._retiring.discard)

    def _open(self) -> _Stubs:
        if self._stubs is None:
            channel = open_channel(self.address, self.tls)
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


async def _aiter(items: BlockSource) -> AsyncIterator[tuple[bytes, bytes]]:
    if isinstance(items, AsyncIterable):
        async for item in items:
            yield item
    else:
        for item in items:
            yield item


def _serialize(message: kvstore_pb2.GetRequest | kvstore_pb2.ReadRequest) -> bytes:
    return message.SerializeToString()
