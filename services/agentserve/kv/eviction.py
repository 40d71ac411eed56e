"""One eviction-policy interface for every KV cache: the engine's paged pool and the store's tiers.

A policy orders the evictable blocks of one cache, keyed by block id. The cache owns the blocks
and calls its policy under its own lock (or from its single thread), so a policy is plain
bookkeeping: no IO, no locking, no clock of its own beyond what hints carry. Guarantees stay with
the cache: the engine's pool only offers blocks no sequence references, the store skips pinned
blocks itself. Hints are advice a policy may use (agent-aware policies: a block pinned until its
session's predicted return, then by priority, then by expected next use).

Policies are chosen by name (`make_eviction_policy`, the `eviction_policy` config fields).
Torch-free and protobuf-free, so configs, simulators and tests can import it.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections import OrderedDict
from collections.abc import Callable, Iterator
from dataclasses import dataclass


@dataclass(frozen=True)
class Hint:
    """What the scheduler knows about a block's future (agent-aware lifecycle); all optional.

    Times are on the cache's clock (`time.monotonic()` unless a test injects one).
    """

    priority: int | None = None  # session priority: higher should stay longer
    pin_until: float | None = None  # the cache will not evict the block before this time
    next_use_at: float | None = None  # when the block is expected to be read again


class EvictionPolicy(ABC):
    """Orders one cache's evictable blocks. Called by the cache, under its lock.

    The engine's pool evicts on its hot path: a policy meant for it keeps `insert`, `touch`,
    `remove`, `pop_victim` and `__len__` O(1) (or close), as `LRUPolicy` does.
    """

    @abstractmethod
    def insert(self, block_id: bytes, size: int) -> None:
        """A block became evictable (it is the most recently used)."""

    @abstractmethod
    def touch(self, block_id: bytes) -> None:
        """An evictable block was used (read, or written again); unknown ids are ignored."""

    @abstractmethod
    def remove(self, block_id: bytes) -> None:
        """A block is no longer evictable (evicted, deleted, referenced again); unknown ids are ignored."""

    @abstractmethod
    def victims(self) -> Iterator[bytes]:
        """Every evictable block, the one to evict first first. The caller stops early and may
        skip some (pinned); it removes the ones it evicts with `remove` after iterating."""

    @abstractmethod
    def __len__(self) -> int:
        """How many blocks the policy orders."""

    def pop_victim(self) -> bytes | None:
        """Remove and return the block to evict first, None when there is none (the engine's pool
        evicts one block at a time); override where `victims()` is costly."""
        block_id = next(self.victims(), None)
        if block_id is not None:
            self.remove(block_id)
        return block_id

    def hint(self, block_id: bytes, hint: Hint) -> None:  # noqa: B027 - optional: LRU ignores hints
        """Advice about one block; a policy that has no use for it ignores it."""


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

    def pop_victim(self) -> bytes | None:
        return self._order.popitem(last=False)[0] if self._order else None

    def __len__(self) -> int:
        return len(self._order)


EVICTION_POLICIES: dict[str, Callable[[], EvictionPolicy]] = {"lru": LRUPolicy}
DEFAULT_EVICTION_POLICY = "lru"


def check_eviction_policy(name: str) -> str:
    """`name` if it names a policy, else ValueError naming the choices (for config validation)."""
    if name not in EVICTION_POLICIES:
        choices = ", ".join(sorted(EVICTION_POLICIES))
        raise ValueError(f"unknown eviction policy {name!r}; choose one of: {choices}")
    return name


def make_eviction_policy(name: str = DEFAULT_EVICTION_POLICY) -> EvictionPolicy:
    """A fresh policy of the named kind (one per cache); ValueError naming the choices if unknown."""
    return EVICTION_POLICIES[check_eviction_policy(name)]()
