"""A real engine's KV pool under pressure, and a stand-in for the store client, for tests of KV moves."""

from __future__ import annotations

from agentserve.engine.engine import LLMEngine
from agentserve.engine.engine_config import EngineConfig

CONFIG = EngineConfig(kv_cache_bytes=16 << 20)


class Store:
    """Serves and stores blocks like `ShardedKVStoreClient` get/put; `get` awaits `at_end` once the
    last block is taken."""

    def __init__(self, blocks: dict[bytes, bytes] | None = None, at_end=None) -> None:
        self.blocks = {} if blocks is None else blocks
        self.at_end = at_end

    async def put(self, fingerprint, blocks):
        self.blocks.update((bytes(block_id), bytes(data)) for block_id, data in blocks)

    async def get(self, fingerprint, ids):
        for block_id in ids:
            if block_id not in self.blocks:
                return
            yield block_id, self.blocks[block_id]
        if self.at_end is not None:
            await self.at_end()


def evict_everything_evictable(engine: LLMEngine) -> int:
    """Take every slot an allocation can get (free, or by evicting a cached block), then give them back."""
    n = engine.blocks.num_free_slots
    tokens = list(range(n * engine.block_size))
    alloc = engine.blocks.allocate(engine.block_ids_for(tokens, "pressure"), len(tokens), 0)
    engine.blocks.free(alloc.slots)
    return n
