"""The DRAM tier: whole, verified blocks held in memory within a byte budget.

It caches blocks that are also on SSD (the tiers are inclusive), so dropping a block from DRAM
never loses data and needs no IO. Blocks are immutable `bytes`, so a reader holding one sees it
whole even if it is evicted a moment later. Not thread-safe: `KVStore` calls it under its lock.
"""

from __future__ import annotations

from collections.abc import Callable

from agentserve.kv.block_format import BlockHeader, read_header
from agentserve.kv.eviction import EvictionPolicy, Hint
from agentserve.kvstore.pins import pick_victims


class _Entry:
    __slots__ = ("data", "_header")

    def __init__(self, data: bytes, header: BlockHeader | None) -> None:
        self.data = data
        self._header = header

    @property
    def header(self) -> BlockHeader:
        if self._header is None:  # when the writer or reader did not hand it over
            self._header = read_header(self.data)
        return self._header


class DramTier:
    def __init__(self, budget_bytes: int, policy: EvictionPolicy, pinned: Callable[[bytes], bool]) -> None:
        if budget_bytes < 0:
            raise ValueError(f"DRAM budget must be >= 0 (0 disables the tier), got {budget_bytes}")
        self.budget_bytes = budget_bytes
        self._policy = policy
        self._pinned = pinned
        self._entries: dict[bytes, _Entry] = {}
        self.bytes = 0
        self.hits = self.misses = self.evictions = 0
        self.peak_bytes = 0

    def __contains__(self, block_id: bytes) -> bool:
        return block_id in self._entries

    def __len__(self) -> int:
        return len(self._entries)

    def get(self, block_id: bytes, count_miss: bool = True) -> _Entry | None:
        """The cached entry (counted as a hit, and used) or None (counted as a miss if asked)."""
        entry = self._entries.get(block_id)
        if entry is None:
            self.misses += count_miss
            return None
        self.hits += 1
        self._policy.touch(block_id)
        return entry

    def header_of(self, block_id: bytes) -> BlockHeader | None:
        """The cached block's header, without counting a hit or using the block."""
        entry = self._entries.get(block_id)
        return None if entry is None else entry.header

    def insert(self, block_id: bytes, data: bytes, header: BlockHeader | None = None) -> bool:
        """Cache a verified block, evicting others to fit; False if it cannot fit (nothing changed)."""
        if block_id in self._entries:
            self._policy.touch(block_id)
            return True
        size = len(data)
        if size > self.budget_bytes:
            return False
        victims = pick_victims(
            self._policy, self.bytes + size - self.budget_bytes, lambda b: len(self._entries[b].data), self._pinned
        )
        if victims is None:
            return False
        for victim in victims:
            self.remove(victim)
            self.evictions += 1
        self._entries[block_id] = _Entry(data, header)
        self.bytes += size
        self.peak_bytes = max(self.peak_bytes, self.bytes)
        self._policy.insert(block_id, size)
        return True

    def remove(self, block_id: bytes) -> bool:
        entry = self._entries.pop(block_id, None)
        if entry is None:
            return False
        self.bytes -= len(entry.data)
        self._policy.remove(block_id)
        return True

    def touch(self, block_id: bytes) -> None:
        self._policy.touch(block_id)

    def hint(self, block_id: bytes, hint: Hint) -> None:
        if block_id in self._entries:
            self._policy.hint(block_id, hint)
