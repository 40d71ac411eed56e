"""The pins every eviction policy must respect, and picking a tier's victims around them.

Each tier (DRAM, SSD) owns one `EvictionPolicy` (`kv.eviction`, chosen by name). The tier asks for
`victims()` and evicts from the front, skipping pinned blocks itself: a pin is a guarantee the
store keeps whatever the policy thinks, hints are advice a policy may use.
"""

from __future__ import annotations

import time
from collections.abc import Callable

from agentserve.kv.eviction import EvictionPolicy


class Pins:
    """Blocks that must not be evicted until a deadline (Pin with a TTL). Not thread-safe: the
    store calls it under its lock. Pins live in memory only; a restart forgets them."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self._clock = clock
        self._until: dict[bytes, float] = {}

    def pin(self, block_id: bytes, ttl_s: float) -> float:
        """Pin until now + ttl_s (a longer existing pin is kept); returns the deadline."""
        until = max(self._clock() + ttl_s, self._until.get(block_id, 0.0))
        self._until[block_id] = until
        return until

    def unpin(self, block_id: bytes) -> bool:
        return self._until.pop(block_id, None) is not None

    def pinned(self, block_id: bytes) -> bool:
        until = self._until.get(block_id)
        if until is None:
            return False
        if until <= self._clock():
            del self._until[block_id]
            return False
        return True

    def count(self) -> int:
        now = self._clock()
        for block_id in [b for b, until in self._until.items() if until <= now]:
            del self._until[block_id]
        return len(self._until)


def pick_victims(
    policy: EvictionPolicy, need: int, size_of: Callable[[bytes], int], pinned: Callable[[bytes], bool]
) -> list[bytes] | None:
    """The policy's first unpinned blocks that together free at least `need` bytes, or None when
    even every unpinned block would not free that much (then nothing should be evicted)."""
    chosen: list[bytes] = []
    freed = 0
    if need <= 0:
        return chosen
    for block_id in policy.victims():
        if pinned(block_id):
            continue
        chosen.append(block_id)
        freed += size_of(block_id)
        if freed >= need:
            return chosen
    return None
