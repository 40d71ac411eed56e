"""ShardedKVStoreClient over two real kvstore processes: blocks placed by consistent hashing,
answers merged back in request order."""

import asyncio

import pytest

from agentserve.kvstore.ring import HashRing
from agentserve.kvstore.sharded import ShardedKVStoreClient
from agentserve.kvstore.types import Tier
from tests.integration.kvstore.support import collect, run, start_kvstore
from tests.support.kv_blocks import FP, chain, make_block

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def two_kvstores(tmp_path_factory):
    services = [start_kvstore(tmp_path_factory.mktemp(f"shard{i}")) for i in range(2)]
    yield services
    for service in services:
        assert service.stop() == 0, service.log.read_text()[-3000:]


def test_blocks_spread_over_instances_and_read_back_in_order(two_kvstores):
    a, b = (s.address for s in two_kvstores)
    ids = chain(24, salt="sharded")
    blocks = [(block_id, make_block(block_id, seed=i)) for i, block_id in enumerate(ids)]
    gap = 17  # never written: every merged reply must stop there

    async def main():
        # A name standing for both instances, as a compose service name resolves to every replica.
        async with ShardedKVStoreClient("kvstore:50052", timeout_s=30, resolve=lambda spec: [b, a]) as client:
            put = await client.put(FP, blocks[:gap])
            written = await client.write(FP, blocks[gap + 1 :])
            found = await client.lookup_tiers(ids)
            got = await collect(client.get(FP, ids))
            reads = await collect(client.read(FP, ids, range(0, 2)))
            pinned = await client.pin(ids, ttl_s=30)
            per_shard = await client.shard_stats()
            total = await client.stats()
            deleted = await client.delete(ids[:2])
            return put, written, found, got, reads, pinned, per_shard, total, deleted, await client.lookup(ids)

    put, written, found, got, reads, pinned, per_shard, total, deleted, prefix_after = asyncio.run(main())
    assert (put.stored, written.stored) == (gap, len(ids) - gap - 1)
    assert found.prefix_blocks == gap and found.tiers[gap] is Tier.NONE
    assert all(t is not Tier.NONE for i, t in enumerate(found.tiers) if i != gap)
    assert got == blocks[:gap]
    assert [r.block_id for r in reads] == ids[:gap] and all(r.layers == range(0, 2) for r in reads)
    assert pinned == len(ids) - 1
    assert set(per_shard) == {a, b} and all(s.blocks > 0 for s in per_shard.values())  # both instances used
    assert total.blocks == sum(s.blocks for s in per_shard.values()) >= len(ids) - 1
    assert total.pinned_blocks == len(ids) - 1 and [t.tier for t in total.tiers] == [Tier.DRAM, Tier.SSD]
    assert (deleted, prefix_after) == (2, 0)


def test_each_instance_holds_exactly_the_blocks_hashed_to_it(two_kvstores):
    addresses = [s.address for s in two_kvstores]
    ids = chain(12, salt="placement")
    blocks = [(block_id, make_block(block_id, seed=i)) for i, block_id in enumerate(ids)]

    async def main():
        async with ShardedKVStoreClient(",".join(addresses), timeout_s=30) as client:
            await client.put(FP, blocks)

    asyncio.run(main())
    ring = HashRing(addresses)  # every client builds the same ring from the same instances
    owners = [ring.node_for(block_id) for block_id in ids]
    for address in addresses:
        mine = [block_id for block_id, owner in zip(ids, owners) if owner == address]
        tiers = run(lambda c: c.lookup_tiers(ids), address).tiers
        assert [block_id for block_id, t in zip(ids, tiers) if t is not Tier.NONE] == mine
