"""Eviction policies of the store's tiers, and the pins every policy must respect.

Each tier (DRAM, SSD) owns one `EvictionPolicy` instance. The tier calls it under its lock, so a
policy is plain bookkeeping: no IO, no locking, no clock of its own beyond what hints carry. The
tier asks for `victims()` and evicts from the front, skipping pinned blocks itself: a pin is a
guarantee the store keeps whatever the policy thinks, hints are advice a policy may use.
"""

from __future__ import annotations

import time
from abc import ABC, abstractmethod
from collections import OrderedDict
from collections.abc import Callable, Iterator
from dataclasses import dataclass


@dataclass(frozen=True)
class Hint:
    """What the scheduler knows about a block's future (agent-aware lifecycle); all optional.

    Times are on the store's clock (`time.monotonic()` unless a test injects one).
    """

    priority: int | None = None  # session priority: higher should stay longer
    pin_until: float | None = None  # the store will not evict the block before this time
    next_use_at: float | None = None  # when the block is expected to be read again


class EvictionPolicy(ABC):
    """Orders one tier's blocks for eviction. Called by the tier, under the tier's lock."""

    @abstractmethod
    def insert(self, block_id: bytes, size: int) -> None:
        """A block entered the tier (it is the most recently used)."""

    @abstractmethod
    def touch(self, block_id: bytes) -> None:
        """A stored block was used (read, or written again)."""

    @abstractmethod
    def remove(self, block_id: bytes) -> None:
        """A block left the tier (evicted, deleted or dropped as corrupt); unknown ids are ignored."""

    @abstractmethod
    def victims(self) -> Iterator[bytes]:
        """Every block of the tier, the one to evict first first. The caller stops early and may
        skip some (pinned); it removes the ones it evicts with `remove` after iterating."""

    def hint(self, block_id: bytes, hint: Hint) -> None:  # noqa: B027 - optional: most policies ignore hints
        """Advice about one stored block; a policy that has no use for it ignores it."""


class LRUPolicy(EvictionPolicy):
    """Least recently used first; hints are ignored (the baseline agent-aware policies beat)."""

    def __init__(self) -> None:
        self._order: OrderedDict[bytes, int] = OrderedDict()

    def insert(self, block_id: bytes, size: int) -> None:
        self._order[block_id] = size
        self._order.move_to_end(block_id)

    def touch(self, block_id: bytes) -> None:
        if block_id in self._order:
            self._order.move_to_end(block_id)

    def remove(self, block_id: bytes) -> None:
        self._order.pop(block_id, None)

    def victims(self) -> Iterator[bytes]:
        return iter(self._order)

    def __len__(self) -> int:
        return len(self._order)


PolicyFactory = Callable[[], EvictionPolicy]


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
