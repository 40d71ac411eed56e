"""One eviction-policy interface for every KV cache: the engine's paged pool and the store's tiers.

A policy orders the evictable blocks of one cache, keyed by block id. The cache owns the blocks
and calls its policy under its own lock (or from its single thread), so a policy is plain
bookkeeping: no IO, no locking, no clock of its own beyond what hints carry. Guarantees stay with
the cache: the engine's pool only offers blocks no sequence references, the store skips pinned
blocks itself. Hints are advice a policy may use (agent-aware policies: a block pinned until its
session's predicted return, then by priority, then by expected next use).

Policies are chosen by name (`make_eviction_policy`, the `eviction_policy` config fields): `lru`,
and `hinted` (issue 14: pinned until predicted return, then priority, then expected next use).
Torch-free and protobuf-free, so configs, simulators and tests can import it.
"""

from __future__ import annotations

import heapq
import itertools
import math
import time
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

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        """`clock` is unused: LRU orders by use, not by time (one constructor for every policy)."""
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


class HintedPolicy(EvictionPolicy):
    """Agent-aware order, the same in the engine's pool and the store's tiers: blocks pinned until
    their session's predicted return go last; the rest by priority, lowest first; then by expected
    next use, furthest first (a block overdue or with no expected use counts as furthest: nobody is
    known to be coming for it); then least recently used. Without hints this is exactly LRU.

    A block is pinned while its `pin_until` or its expected next use is ahead: the next use the
    scheduler gives a parked session's KV is its predicted return, so that KV outlasts every idle
    block nobody is known to be coming for, whatever that block's priority (an idle critical
    session's history would otherwise evict a worker's context due back in a second, and the
    worker would reload it). Pinned is not untouchable: when only pinned blocks are left, they go
    too, lowest priority and furthest next use first; once the predicted return has passed (a late
    return), the block is ordered by its priority like any other.

    Unhinted blocks stay in one LRU order; a hint only moves its own block. Each eviction compares
    the oldest unhinted block with every hinted one, so it costs O(hinted blocks): the blocks of
    parked sessions, few next to a pool. A hint that no longer changes the order (pin and next use
    past, priority 0) is dropped on the way. Hints merge: a field a new hint leaves None keeps its
    value. Times are on `clock` (the hints' clock: `time.monotonic()` in both caches).
    """

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self._clock = clock
        self._stamps: OrderedDict[bytes, int] = OrderedDict()  # every block, least recently used first
        self._hints: dict[bytes, Hint] = {}  # evictable blocks with a hint
        self._tick = itertools.count()

    def insert(self, block_id: bytes, size: int) -> None:
        self._stamps[block_id] = next(self._tick)
        self._stamps.move_to_end(block_id)

    def touch(self, block_id: bytes) -> None:
        if block_id in self._stamps:
            self._stamps[block_id] = next(self._tick)
            self._stamps.move_to_end(block_id)

    def remove(self, block_id: bytes) -> None:
        self._stamps.pop(block_id, None)
        self._hints.pop(block_id, None)

    def hint(self, block_id: bytes, hint: Hint) -> None:
        if block_id not in self._stamps:
            return
        old = self._hints.get(block_id, Hint())
        self._hints[block_id] = Hint(
            old.priority if hint.priority is None else hint.priority,
            old.pin_until if hint.pin_until is None else hint.pin_until,
            old.next_use_at if hint.next_use_at is None else hint.next_use_at,
        )

    def victims(self) -> Iterator[bytes]:
        now = self._clock()
        hinted = sorted(self._hints, key=lambda b: self._key(b, now))
        unhinted = (b for b in self._stamps if b not in self._hints)
        return (b for b in heapq.merge(unhinted, hinted, key=lambda b: self._key(b, now)))

    def pop_victim(self) -> bytes | None:
        now = self._clock()
        for block_id in [b for b, h in self._hints.items() if _spent(h, now)]:
            del self._hints[block_id]
        first = next((b for b in self._stamps if b not in self._hints), None)
        if self._hints:
            best = min(self._hints, key=lambda b: self._key(b, now))
            if first is None or self._key(best, now) < self._key(first, now):
                first = best
        if first is not None:
            self.remove(first)
        return first

    def __len__(self) -> int:
        return len(self._stamps)

    def _key(self, block_id: bytes, now: float) -> tuple[bool, int, float, int]:
        """Ascending: the smallest key is evicted first."""
        hint = self._hints.get(block_id)
        if hint is None:
            return False, 0, -math.inf, self._stamps[block_id]
        upcoming = hint.next_use_at is not None and hint.next_use_at > now
        pinned = upcoming or (hint.pin_until is not None and hint.pin_until > now)
        next_use = -hint.next_use_at if upcoming else -math.inf  # type: ignore[operator]
        return pinned, hint.priority or 0, next_use, self._stamps[block_id]


def _spent(hint: Hint, now: float) -> bool:
    """Whether `hint` orders its block as if it had none."""
    return (
        not hint.priority
        and (hint.pin_until is None or hint.pin_until <= now)
        and (hint.next_use_at is None or hint.next_use_at <= now)
    )


EVICTION_POLICIES: dict[str, Callable[[Callable[[], float]], EvictionPolicy]] = {
    "lru": LRUPolicy,
    "hinted": HintedPolicy,
}
DEFAULT_EVICTION_POLICY = "lru"


def check_eviction_policy(name: str) -> str:
    """`name` if it names a policy, else ValueError naming the choices (for config validation)."""
    if name not in EVICTION_POLICIES:
        choices = ", ".join(sorted(EVICTION_POLICIES))
        raise ValueError(f"unknown eviction policy {name!r}; choose one of: {choices}")
    return name


def make_eviction_policy(
    name: str = DEFAULT_EVICTION_POLICY, clock: Callable[[], float] = time.monotonic
) -> EvictionPolicy:
    """A fresh policy of the named kind (one per cache) whose hints are on `clock` (a simulator's
    virtual time; `time.monotonic` in the services); ValueError naming the choices if unknown."""
    return EVICTION_POLICIES[check_eviction_policy(name)](clock)
