"""`ShardedKVStoreClient`: the `KVStoreClient` API over several kvstore instances.

Each block lives on the instance its id hashes to (`ring.HashRing`). Calls split their ids by
instance, run the parts concurrently and put the answers back in request order; streams keep
their prefix contract (a reply ends at the first block not stored, on whichever instance).

Instances come from a config value: `host:port[,host:port...]`, where a name resolving to several
IPs (`kvstore:50052` with `docker compose up --scale kvstore=2`) means all of them. The value is
resolved again every `refresh_s`, so instances added later join the ring.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncGenerator, AsyncIterator, Awaitable, Callable, Iterable, Sequence
from typing import TypeVar

from agentserve.common.internal_tls import InternalTLS
from agentserve.kvstore.client import BlockSource, KVStoreClient
from agentserve.kvstore.ring import DEFAULT_VNODES, HashRing, resolve_addresses
from agentserve.kvstore.types import BlockRead, LookupResult, Tier
from agentserve.v1 import kvstore_pb2

T = TypeVar("T")
_SUMMED = (
    "blocks",
    "bytes",
    "hits",
    "misses",
    "corrupt_dropped",
    "reserved_bytes",
    "pinned_blocks",
    "read_bytes",
    "write_bytes",
    "read_bytes_per_s",
    "write_bytes_per_s",
)
_TIER_SUMMED = ("blocks", "bytes", "budget_bytes", "hits", "misses", "evictions", "peak_bytes")


class ShardedKVStoreClient:
    def __init__(
        self,
        addresses: str | Sequence[str],
        timeout_s: float | None = None,
        refresh_s: float = 30.0,
        vnodes: int = DEFAULT_VNODES,
        resolve: Callable[[str], list[str]] = resolve_addresses,
        tls: InternalTLS | None = None,
    ) -> None:
        self.spec = addresses if isinstance(addresses, str) else ",".join(addresses)
        self.timeout_s = timeout_s
        self.tls = tls
        self.refresh_s = refresh_s
        self._vnodes = vnodes
        self._resolve = resolve
        self._clients: dict[str, KVStoreClient] = {}
        self._ring: HashRing | None = None
        self._resolved_at = float("-inf")

    @property
    def addresses(self) -> tuple[str, ...]:
        return self._ring.nodes if self._ring else ()

    async def put(self, fingerprint: str, blocks: Sequence[tuple[bytes, bytes]]) -> kvstore_pb2.PutResponse:
        parts = await self._split(blocks, key=lambda b: b[0])
        return _sum_puts(await _gather(self._clients[a].put(fingerprint, part) for a, part in parts.items()))

    async def write(self, fingerprint: str, blocks: BlockSource) -> kvstore_pb2.PutResponse:
        items = [b async for b in blocks] if hasattr(blocks, "__aiter__") else list(blocks)
        parts = await self._split(items, key=lambda b: b[0])
        return _sum_puts(await _gather(self._clients[a].write(fingerprint, part) for a, part in parts.items()))

    async def get(self, fingerprint: str, block_ids: Sequence[bytes]) -> AsyncIterator[tuple[bytes, bytes]]:
        async for item in self._merged(block_ids, lambda c, ids: c.get(fingerprint, ids)):
            yield item

    async def read(
        self, fingerprint: str, block_ids: Sequence[bytes], layers: range | None = None
    ) -> AsyncIterator[BlockRead]:
        async for item in self._merged(block_ids, lambda c, ids: c.read(fingerprint, ids, layers)):
            yield item

    async def lookup(self, block_ids: Sequence[bytes]) -> int:
        return (await self.lookup_tiers(block_ids)).prefix_blocks

    async def lookup_tiers(self, block_ids: Sequence[bytes]) -> LookupResult:
        indexed = await self._split(list(enumerate(block_ids)), key=lambda item: item[1])
        results = await _gather(self._clients[a].lookup_tiers([b for _, b in part]) for a, part in indexed.items())
        tiers = [Tier.NONE] * len(block_ids)
        for part, result in zip(indexed.values(), results):
            for (i, _), tier in zip(part, result.tiers):
                tiers[i] = tier
        prefix = next((i for i, t in enumerate(tiers) if t is Tier.NONE), len(tiers))
        return LookupResult(prefix, tuple(tiers))

    async def pin(self, block_ids: Sequence[bytes], ttl_s: float) -> int:
        return await self._count(block_ids, lambda c, ids: c.pin(ids, ttl_s))

    async def unpin(self, block_ids: Sequence[bytes]) -> int:
        return await self._count(block_ids, lambda c, ids: c.unpin(ids))

    async def hint(
        self, block_ids: Sequence[bytes], priority: int | None = None, next_use_in_s: float | None = None
    ) -> int:
        return await self._count(block_ids, lambda c, ids: c.hint(ids, priority, next_use_in_s))

    async def delete(self, block_ids: Sequence[bytes]) -> int:
        return await self._count(block_ids, lambda c, ids: c.delete(ids))

    async def shard_stats(self) -> dict[str, kvstore_pb2.StatsResponse]:
        await self._refresh()
        addresses = list(self.addresses)
        return dict(zip(addresses, await _gather(self._clients[a].stats() for a in addresses)))

    async def stats(self) -> kvstore_pb2.StatsResponse:
        """Every instance's stats added up (tiers added up per tier)."""
        total = kvstore_pb2.StatsResponse()
        tiers: dict[int, kvstore_pb2.TierStats] = {}
        for stats in (await self.shard_stats()).values():
            for name in _SUMMED:
                setattr(total, name, getattr(total, name) + getattr(stats, name))
            for tier in stats.tiers:
                into = tiers.setdefault(tier.tier, kvstore_pb2.TierStats(tier=tier.tier))
                for name in _TIER_SUMMED:
                    setattr(into, name, getattr(into, name) + getattr(tier, name))
        total.tiers.extend(tiers[t] for t in sorted(tiers))
        return total

    async def close(self) -> None:
        clients, self._clients = self._clients, {}
        for client in clients.values():
            await client.close()

    async def __aenter__(self) -> ShardedKVStoreClient:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.close()

    # -- internals --------------------------------------------------------------------------------

    async def _refresh(self) -> HashRing:
        """The ring, resolved again if it is older than `refresh_s`."""
        if time.monotonic() - self._resolved_at < self.refresh_s and self._ring is not None:
            return self._ring
        addresses = await asyncio.to_thread(self._resolve, self.spec)
        self._resolved_at = time.monotonic()
        if self._ring is not None and set(addresses) == set(self._ring.nodes):
            return self._ring
        self._ring = ring = HashRing(addresses, self._vnodes)
        for gone in set(self._clients) - set(addresses):
            await self._clients.pop(gone).close()
        for address in addresses:
            self._clients.setdefault(address, KVStoreClient(address, self.timeout_s, self.tls))
        return ring

    async def _split(self, items: Sequence[T], key: Callable[[T], bytes]) -> dict[str, list[T]]:
        """Items grouped by the instance owning `key(item)`, in their original order."""
        ring = await self._refresh()
        return _group(items, [ring.node_for(bytes(key(item))) for item in items])

    async def _count(
        self, block_ids: Sequence[bytes], call: Callable[[KVStoreClient, list[bytes]], Awaitable[int]]
    ) -> int:
        parts = await self._split(block_ids, key=lambda b: b)
        return sum(await _gather(call(self._clients[a], part) for a, part in parts.items()))

    async def _merged(
        self, block_ids: Sequence[bytes], stream: Callable[[KVStoreClient, list[bytes]], AsyncGenerator[T, None]]
    ) -> AsyncIterator[T]:
        """One stream per instance, merged back into request order up to the first missing block."""
        ring = await self._refresh()
        owners = [ring.node_for(bytes(b)) for b in block_ids]
        streams = {a: stream(self._clients[a], part) for a, part in _group(block_ids, owners).items()}
        # Every instance starts sending at once, not when the merge first reaches its blocks.
        heads = {a: asyncio.ensure_future(s.__anext__()) for a, s in streams.items()}
        try:
            for owner in owners:
                head = heads.pop(owner, None)
                try:
                    item = await head if head is not None else await streams[owner].__anext__()
                except StopAsyncIteration:
                    return
                yield item
        finally:
            for head in heads.values():
                head.cancel()
            await asyncio.gather(*heads.values(), return_exceptions=True)  # let each stream unwind
            for s in streams.values():
                await s.aclose()


def _group(items: Sequence[T], owners: Sequence[str]) -> dict[str, list[T]]:
    """`items` grouped by their owner (`owners[i]` owns `items[i]`), in their original order."""
    parts: dict[str, list[T]] = {}
    for item, owner in zip(items, owners):
        parts.setdefault(owner, []).append(item)
    return parts


async def _gather(calls: Iterable[Awaitable[T]]) -> list[T]:
    """Run all calls to the end, then raise the first error if any (no call is left running)."""
    results = await asyncio.gather(*calls, return_exceptions=True)
    done: list[T] = []
    for result in results:
        if isinstance(result, BaseException):
            raise result
        done.append(result)
    return done


def _sum_puts(responses: Sequence[kvstore_pb2.PutResponse]) -> kvstore_pb2.PutResponse:
    return kvstore_pb2.PutResponse(
        stored=sum(r.stored for r in responses),
        existing=sum(r.existing for r in responses),
        bytes_written=sum(r.bytes_written for r in responses),
    )
