"""BlockManager: the engine's paged-KV slot allocator with prefix caching.

A fixed pool of `num_slots` physical slots, each holding `block_size` tokens of KV. A slot is in
exactly one of three states:

- in use: ref count > 0, owned by one or more running sequences (or held: see `hold`);
- cached: ref count 0 but sealed under a block id, so a later sequence can still hit it; ordered
  by an `EvictionPolicy` keyed by that id (LRU by default: oldest freed first) and evicted only
  when no free slot is left;
- free: ref count 0 and no id.

Callers check, then act: `can_allocate()` / `can_append()` say whether the matching mutation will
succeed, and the mutations validate everything before changing any state, so a failed call leaves
the manager exactly as it was. Single-threaded by design: the engine's scheduler loop owns it.
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from agentserve.kv.eviction import DEFAULT_EVICTION_POLICY, Hint, make_eviction_policy


@dataclass
class Allocation:
    slots: list[int]  # physical slot per block of the sequence, incl. a trailing partial block
    num_cached_tokens: int  # leading tokens whose KV is already resident (hit), multiple of block_size


class BlockManager:
    def __init__(
        self,
        num_slots: int,
        block_size: int,
        eviction_policy: str = DEFAULT_EVICTION_POLICY,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        """`clock`: the time hints are given on (`Hint.pin_until`, `next_use_at`): the engine's
        monotonic clock, or a simulator's virtual time."""
        if not isinstance(num_slots, int) or num_slots <= 0:
            raise ValueError(f"num_slots must be a positive integer, got {num_slots!r}")
        if not isinstance(block_size, int) or block_size <= 0:
            raise ValueError(f"block_size must be a positive integer, got {block_size!r}")
        self.num_slots = num_slots
        self.block_size = block_size
        self._refs = [0] * num_slots
        self._sealed_id: list[bytes | None] = [None] * num_slots
        self._slot_of: dict[bytes, int] = {}
        self._free: deque[int] = deque(range(num_slots))
        self._evictable = make_eviction_policy(eviction_policy, clock)  # the cached slots' block ids
        self._held_hints: dict[bytes, Hint] = {}  # hints for blocks in use, given to the policy when freed
        self._holds: dict[int, int] = {}  # slot -> references taken by `hold` and not yet released
        self.hit_blocks = 0
        self.miss_blocks = 0
        self.evictions = 0

    @property
    def num_free_slots(self) -> int:
        """Slots a fresh allocation can take now: free ones plus evictable cached ones."""
        return len(self._free) + len(self._evictable)

    def cached_prefix(self, block_ids: Sequence[bytes]) -> int:
        """How many leading `block_ids` are resident (in use or cached). Changes nothing."""
        count = 0
        for block_id in block_ids:
            if block_id not in self._slot_of:
                break  # chained ids: a missing block means no later block can be a valid hit
            count += 1
        return count

    def lookup(self, block_id: bytes) -> int | None:
        """The slot holding `block_id` (in use or cached), or None. Changes nothing, not even LRU order."""
        return self._slot_of.get(block_id)

    def can_allocate(
        self, num_tokens: int, num_hit_blocks: int, block_ids: Sequence[bytes] | None = None, keep_free: int = 0
    ) -> bool:
        """Whether `allocate(block_ids, num_tokens, num_hit_blocks)` would succeed leaving at least
        `keep_free` fresh slots (a share held for others).

        Reviving a cached hit takes that slot out of the evictable pool, so the exact answer needs
        the hit ids. Without `block_ids` the answer is conservative (it assumes every hit is cached
        rather than in use), so True still guarantees success. A malformed request raises
        ValueError here as it would in `allocate`.
        """
        if block_ids is None:
            num_blocks = self._num_blocks(num_tokens)
            self._check_hits(num_hit_blocks, num_tokens // self.block_size)
            return num_blocks + keep_free <= self.num_free_slots
        num_fresh, available = self._plan(block_ids, num_tokens, num_hit_blocks)
        return num_fresh + keep_free <= available

    def allocate(self, block_ids: Sequence[bytes], num_tokens: int, num_hit_blocks: int) -> Allocation:
        """Reference the first `num_hit_blocks` resident blocks and take fresh slots for the rest.

        `block_ids` are the ids of the sequence's full blocks (`num_tokens // block_size` of them).
        The hits are usually `cached_prefix(block_ids)`, possibly reduced by the caller (e.g. to
        leave at least one token to compute). Fresh slots come from the free list first, then by
        evicting the eviction policy's first cached slot (with `lru`, the least recently freed).
        Raises ValueError for a bad request and RuntimeError when the pool is too full; either way
        nothing changes.
        """
        num_fresh, available = self._plan(block_ids, num_tokens, num_hit_blocks)
        if num_fresh > available:
            raise RuntimeError(
                f"out of KV slots: need {num_fresh} fresh slots, {available} available; call can_allocate() first"
            )
        slots = [self._slot_of[block_id] for block_id in block_ids[:num_hit_blocks]]
        for slot in slots:
            self._take_ref(slot)  # revive before taking fresh slots, so eviction cannot pick a hit
        slots.extend(self._take_fresh() for _ in range(num_fresh))
        self.hit_blocks += num_hit_blocks
        self.miss_blocks += len(block_ids) - num_hit_blocks
        return Allocation(slots=slots, num_cached_tokens=num_hit_blocks * self.block_size)

    def available_after(self, hit_ids: Sequence[bytes]) -> int:
        """Fresh slots left once the resident `hit_ids` are referenced (`pin`): a cached hit leaves
        the evictable pool when revived. Changes nothing."""
        slots = {self._slot_of[b] for b in hit_ids if b in self._slot_of}
        return self.num_free_slots - sum(1 for slot in slots if self._refs[slot] == 0)

    def reserve(self, num_slots: int) -> list[int]:
        """Take `num_slots` fresh, unsealed slots (freed with `free`) for KV that is no block of a
        sequence yet, or never: a layerwise prefill's new blocks, or its one-layer staging.
        Raises RuntimeError, taking nothing, when fewer are available."""
        if not isinstance(num_slots, int) or num_slots < 0:
            raise ValueError(f"num_slots must be an integer >= 0, got {num_slots!r}")
        if num_slots > self.num_free_slots:
            raise RuntimeError(f"out of KV slots: need {num_slots} fresh slots, {self.num_free_slots} available")
        return [self._take_fresh() for _ in range(num_slots)]

    def pin(self, block_ids: Sequence[bytes]) -> list[int]:
        """Reference resident blocks so that no allocation can evict them until `free(slots)`.

        For a transfer that holds blocks across engine steps (a relay exports them some time after
        it imported them). Not a cache hit: the hit counters do not move. Raises ValueError, with
        nothing pinned, if one of them is not resident.
        """
        slots = []
        for block_id in block_ids:
            slot = self._slot_of.get(block_id)
            if slot is None:
                raise ValueError(f"block {bytes(block_id).hex()} is not resident; only resident blocks can be pinned")
            slots.append(slot)
        for slot in slots:
            self._take_ref(slot)
        return slots

    def hold(self, block_ids: Sequence[bytes]) -> list[int]:
        """`pin` for the KV lifecycle: keep a parked session's resident blocks for its return
        (`release(slots)` ends it). Counted apart from sequences' references, so `stats` can tell
        KV kept idle for a future turn (`held`) from KV a running sequence uses."""
        slots = self.pin(block_ids)
        for slot in slots:
            self._holds[slot] = self._holds.get(slot, 0) + 1
        return slots

    def release(self, slots: Sequence[int]) -> None:
        """End holds taken by `hold` (its slots, as it returned them)."""
        for slot in slots:
            if self._holds.get(slot, 0) < 1:
                raise ValueError(f"slot {slot} is not held; release only what hold returned")
        self.free(slots)
        for slot in slots:
            self._holds[slot] -= 1
            if not self._holds[slot]:
                del self._holds[slot]

    def can_append(self, slots: Sequence[int], num_tokens_after: int) -> bool:
        """Whether `append(slots, num_tokens_after)` would succeed."""
        needed = self._num_blocks(num_tokens_after) - len(slots)
        return needed <= 0 or (needed == 1 and self.num_free_slots >= 1)

    def append(self, slots: list[int], num_tokens_after: int) -> None:
        """Grow `slots` in place by one slot when the sequence's next token starts a new block."""
        needed = self._num_blocks(num_tokens_after) - len(slots)
        if needed <= 0:
            return
        if needed > 1:
            raise ValueError(f"{num_tokens_after} tokens need {needed} more slots; append grows by one token at a time")
        if self.num_free_slots == 0:
            raise RuntimeError("out of KV slots: cannot append a block; call can_append() first")
        slots.append(self._take_fresh())

    def seal(self, slot: int, block_id: bytes) -> None:
        """Register a slot whose block is full and whose KV is written, so later sequences hit it.

        If `block_id` is already registered to another slot (two sequences computed the same block
        concurrently), the existing mapping wins and this slot stays private: it returns to the free
        list when its sequence frees it.
        """
        self._check_slot(slot)
        if not isinstance(block_id, bytes):
            raise ValueError(f"block_id must be bytes, got {type(block_id).__name__}")
        if self._refs[slot] == 0:
            raise ValueError(f"slot {slot} is not in use; only an allocated slot can be sealed")
        current = self._sealed_id[slot]
        if current is not None:
            if current != block_id:
                raise ValueError(f"slot {slot} is already sealed under a different block id")
            return
        if block_id in self._slot_of:
            return
        self._sealed_id[slot] = block_id
        self._slot_of[block_id] = slot

    def free(self, slots: Sequence[int]) -> None:
        """Drop one reference per entry of `slots` (a sequence's slots, in block order).

        A sealed slot reaching 0 refs becomes cached (still hittable), the eviction policy's most
        recently used block; an unsealed one returns to the free list. Slots are released last
        block first, so eviction takes a sequence's deepest blocks before its root: evicting the
        root would orphan every block chained after it.
        """
        drops: dict[int, int] = {}
        for slot in slots:
            self._check_slot(slot)
            drops[slot] = drops.get(slot, 0) + 1
        for slot, count in drops.items():
            if self._refs[slot] < count:
                raise ValueError(f"slot {slot} freed more times than it is referenced (double free?)")
        for slot in reversed(slots):
            self._refs[slot] -= 1
            if self._refs[slot] > 0:
                continue
            block_id = self._sealed_id[slot]
            if block_id is not None:
                self._evictable.insert(block_id, 1)
                hint = self._held_hints.pop(block_id, None)
                if hint is not None:
                    self._evictable.hint(block_id, hint)
            else:
                self._free.append(slot)

    def drop(self, block_ids: Sequence[bytes]) -> int:
        """Evict the cached (resident, unreferenced) blocks among `block_ids` now, deepest first;
        blocks in use or absent are left alone. Returns how many were dropped. For a session that
        parks on a tool: its blocks are in the store, and its pool space is worth more to others."""
        dropped = 0
        for block_id in reversed(block_ids):
            slot = self._slot_of.get(block_id)
            if slot is None or self._refs[slot] > 0:
                continue
            self._evictable.remove(block_id)
            del self._slot_of[block_id]
            self._sealed_id[slot] = None
            self._free.append(slot)
            dropped += 1
        return dropped

    def hint(self, block_ids: Sequence[bytes], hint: Hint) -> int:
        """Advice for the eviction policy about the resident blocks among `block_ids`: a cached one
        gets it now, one in use when it is freed (a later hint replaces it). How many are resident."""
        resident = 0
        for block_id in block_ids:
            slot = self._slot_of.get(block_id)
            if slot is None:
                continue
            resident += 1
            if self._refs[slot] == 0:
                self._evictable.hint(block_id, hint)
            else:
                self._held_hints[block_id] = hint
        return resident

    def eviction_order(self) -> list[int]:
        """The cached slots, the one the next eviction takes first. Changes nothing; O(cached)."""
        return [self._slot_of[block_id] for block_id in self._evictable.victims()]

    def stats(self) -> dict[str, int]:
        """Slot counts by state plus hit/miss/eviction counters (in full blocks). `used` counts every
        referenced slot; `held` the used ones referenced only by holds (idle KV kept for a return)."""
        return {
            "num_slots": self.num_slots,
            "used": self.num_slots - len(self._free) - len(self._evictable),
            "held": sum(1 for slot, n in self._holds.items() if self._refs[slot] == n),
            "free": len(self._free),
            "cached": len(self._evictable),
            "resident_blocks": len(self._slot_of),
            "hit_blocks": self.hit_blocks,
            "miss_blocks": self.miss_blocks,
            "evictions": self.evictions,
        }

    def _num_blocks(self, num_tokens: int) -> int:
        if not isinstance(num_tokens, int) or num_tokens <= 0:
            raise ValueError(f"num_tokens must be a positive integer, got {num_tokens!r}")
        return -(-num_tokens // self.block_size)

    def _check_hits(self, num_hit_blocks: int, num_full_blocks: int) -> None:
        if not isinstance(num_hit_blocks, int) or not 0 <= num_hit_blocks <= num_full_blocks:
            raise ValueError(f"num_hit_blocks must be in [0, {num_full_blocks}], got {num_hit_blocks!r}")

    def _plan(self, block_ids: Sequence[bytes], num_tokens: int, num_hit_blocks: int) -> tuple[int, int]:
        """Validate an allocation request; return (fresh slots needed, fresh slots available)."""
        num_blocks = self._num_blocks(num_tokens)
        num_full = num_tokens // self.block_size
        if len(block_ids) != num_full:
            raise ValueError(
                f"expected {num_full} full-block ids for {num_tokens} tokens at block_size "
                f"{self.block_size}, got {len(block_ids)}"
            )
        self._check_hits(num_hit_blocks, num_full)
        hits = block_ids[:num_hit_blocks]
        resident = self.cached_prefix(hits)
        if resident < num_hit_blocks:
            raise ValueError(f"hit block {resident} is not resident; num_hit_blocks must come from cached_prefix()")
        # A cached hit leaves the evictable pool when revived, so it is no longer available fresh.
        revived = {self._slot_of[b] for b in hits if self._refs[self._slot_of[b]] == 0}
        return num_blocks - num_hit_blocks, self.num_free_slots - len(revived)

    def _take_ref(self, slot: int) -> None:
        if self._refs[slot] == 0:  # cached (only resident slots are referenced again): no longer evictable
            self._evictable.remove(self._sealed_id[slot])  # type: ignore[arg-type]
        self._refs[slot] += 1

    def _take_fresh(self) -> int:
        if self._free:
            slot = self._free.popleft()
        else:
            block_id = self._evictable.pop_victim()
            assert block_id is not None  # callers check num_free_slots first
            slot = self._slot_of.pop(block_id)
            self._sealed_id[slot] = None
            self.evictions += 1
        self._refs[slot] = 1
        return slot

    def _check_slot(self, slot: int) -> None:
        if not isinstance(slot, int) or not 0 <= slot < self.num_slots:
            raise ValueError(f"slot must be an integer in [0, {self.num_slots}), got {slot!r}")
