"""A serving engine (one GPU) in virtual time, as TokenCake and vLLM run one: a paged KV pool with
prefix caching, continuous batching with chunked prefill, and a storage NIC share to the store.

The pool is the engine's own `BlockManager` with the policy's eviction policy, its hints on
virtual time. A waiting turn is admitted, first come first served, when the pool can hold its
prompt and output (`can_allocate`, with the critical reserve held back from non-critical turns as
`LLMEngine.critical_reserve` sizes it); admission references the context's resident blocks (hits).
The rest of the context is read from the store over the engine's share of its node's storage NIC
when the policy has a store, and computed again when it has not (vLLM: an evicted block is gone).

Each iteration computes up to `chunk_tokens` prompt tokens of admitted turns, oldest first, and
one token of every decoding turn; it takes the prefill chunks' `ComputeCost.prefill_s` plus one
`decode_step_s` over the decoding contexts. A turn's first token comes with the iteration that
finishes its prompt. At its last token the turn's full blocks are sealed and freed: they stay
cached (hittable, evictable) for the session's next turn.

The engine keeps the two areas its KV utilisation is made of: slot-seconds referenced by turns in
flight, and slot-seconds a cached block waited before it was hit again (TokenCake's effective
utilisation counts KV memory that is used again; a block evicted unused never counts).
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Sequence

from agentserve.costmodel.timing import ComputeCost
from agentserve.kv.block_manager import BlockManager
from agentserve.kv.eviction import Hint
from agentserve.sim.agentaware.policies import AwarePolicy
from agentserve.sim.agentaware.turn import AwareTurn
from agentserve.sim.events import EventLoop
from agentserve.sim.nic import SharedLink

PREFIX = b"prefix:"
CRITICAL_PRIORITY = 1  # a critical-path session's blocks in a hinted pool: kept over other idle blocks


class AwareEngine:
    def __init__(  # noqa: PLR0913 - the engine's compute, pool, store link and the turn-done hook
        self,
        engine_id: str,
        loop: EventLoop,
        cost: ComputeCost,
        pool_blocks: int,
        block_size: int,
        policy: AwarePolicy,
        link: SharedLink,
        block_bytes: int,
        chunk_tokens: int,
        on_done: Callable[[AwareTurn], None],
    ) -> None:
        self.engine_id = engine_id
        self.loop = loop
        self.cost = cost
        self.block_size = block_size
        self.policy = policy
        self.link = link
        self.block_bytes = block_bytes
        self.chunk_tokens = chunk_tokens
        self.on_done = on_done
        self.blocks = BlockManager(pool_blocks, block_size, policy.eviction, clock=loop.now)
        self.reserve_slots = int(policy.critical_reserve * pool_blocks)
        self._waiting: deque[AwareTurn] = deque()
        self._loading: list[AwareTurn] = []
        self._prefilling: list[AwareTurn] = []
        self._decoding: list[AwareTurn] = []
        self._busy = False
        self.busy_s = 0.0
        self.held_slots = 0  # references the lifecycle's pins hold (idle KV kept for a return)
        self._cached_since: dict[bytes, float] = {}
        self._area_at = 0.0
        self.used_area = 0.0  # slot-seconds referenced by turns in flight
        self.reused_area = 0.0  # slot-seconds cached blocks waited before they were hit again
        self.loaded_blocks = 0
        self.recomputed_tokens = 0

    @property
    def load(self) -> int:
        """Turns here, waiting or in flight (what the router balances)."""
        return len(self._waiting) + len(self._loading) + len(self._prefilling) + len(self._decoding)

    def submit(self, turn: AwareTurn) -> None:
        need = -(-turn.total_tokens // self.block_size)
        if need > self.blocks.num_slots:
            raise ValueError(
                f"a turn of {turn.total_tokens} tokens needs {need} KV blocks, more than an engine's pool "
                f"({self.blocks.num_slots}): raise the pool or lower the workload's context"
            )
        turn.engine = self.engine_id
        self._waiting.append(turn)
        self._admit()
        self._kick()

    def resident_prefix(self, block_ids: Sequence[bytes]) -> int:
        return self.blocks.cached_prefix(block_ids)

    # The lifecycle's moves (`KVParking`'s DropKV, HintKV and PrefetchKV).

    def drop(self, block_ids: Sequence[bytes]) -> int:
        return self.blocks.drop([b for b in block_ids if not b.startswith(PREFIX)])

    def hint(self, block_ids: Sequence[bytes], hint: Hint) -> int:
        return self.blocks.hint([b for b in block_ids if not b.startswith(PREFIX)], hint)

    def hint_kv(
        self, block_ids: Sequence[bytes], priority: int | None, next_use_in_s: float | None, pin_s: float = 0.0
    ) -> int:
        """The decode worker's HintKV: priority and next use to the eviction policy, and with
        `pin_s` the resident blocks held for that long (released when it ends)."""
        now = self.loop.now()
        resident = self.hint(block_ids, Hint(priority, None, None if next_use_in_s is None else now + next_use_in_s))
        if pin_s > 0:
            ids = [b for b in block_ids if not b.startswith(PREFIX) and self.blocks.lookup(b) is not None]
            self._account()
            slots = self.blocks.hold(ids)
            self.held_slots += len(slots)
            self.loop.after(pin_s, lambda: self._unpin(slots))
        return resident

    def _unpin(self, slots: list[int]) -> None:
        self._account()
        self.blocks.release(slots)
        self.held_slots -= len(slots)
        self._admit()
        self._kick()

    def prefetch(self, block_ids: Sequence[bytes], on_done: Callable[[int], None]) -> bool:
        """Load the blocks of `block_ids` this pool lacks from the store; `on_done(loaded)` when
        they are resident (cached, evictable by the pool's policy). False, taking nothing, when the
        pool has no room for them now."""
        resident = self.blocks.cached_prefix(block_ids)
        missing = len(block_ids) - resident
        if missing == 0:
            on_done(0)
            return True
        tokens = len(block_ids) * self.block_size
        if not self.blocks.can_allocate(tokens, resident, block_ids, keep_free=self.reserve_slots):
            return False
        self._account()
        slots = self.blocks.allocate(block_ids, tokens, resident).slots
        for block_id in block_ids[resident:]:
            self._cached_since.pop(block_id, None)

        def loaded() -> None:
            self._account()
            for slot, block_id in zip(slots, block_ids, strict=True):
                self.blocks.seal(slot, block_id)
            self.blocks.free(slots)
            now = self.loop.now()
            for block_id in block_ids[resident:]:
                self._cached_since[block_id] = now
            self.loaded_blocks += missing
            on_done(missing)
            self._admit()
            self._kick()

        self.link.send(missing * self.block_bytes, loaded, owner=self.engine_id)
        return True

    # Admission and iterations.

    def _keep_free(self, turn: AwareTurn) -> int:
        """`LLMEngine.critical_reserve`: what critical turns here still need, up to the share."""
        if turn.critical or not self.reserve_slots:
            return 0
        demand = 0
        for t in (*self._waiting, *self._loading, *self._prefilling, *self._decoding):
            if t.critical:
                demand += max(0, -(-t.total_tokens // self.block_size) - len(t.slots))
        return min(demand, self.reserve_slots)

    def _admit(self) -> None:
        while self._waiting:
            turn = self._waiting[0]
            usable = min(len(turn.block_ids), (turn.prompt_tokens - 1) // self.block_size)
            hits = self.blocks.cached_prefix(turn.block_ids[:usable])
            if not self.blocks.can_allocate(turn.total_tokens, hits, turn.block_ids, self._keep_free(turn)):
                return
            self._waiting.popleft()
            self._start(turn, hits)

    def _start(self, turn: AwareTurn, hits: int) -> None:
        self._account()
        now = self.loop.now()
        for block_id in turn.block_ids[:hits]:
            since = self._cached_since.pop(block_id, None)
            if since is not None:
                self.reused_area += now - since
        for block_id in turn.block_ids[hits:]:
            self._cached_since.pop(block_id, None)
        turn.slots = self.blocks.allocate(turn.block_ids, turn.total_tokens, hits).slots
        turn.hit_blocks = hits
        prior_blocks = turn.prior_tokens // self.block_size
        if turn.returning and hits < prior_blocks:
            turn.kv_left = True  # evicted or dropped during the wait, and not brought back
        turn.loaded_blocks = max(0, prior_blocks - hits) if self.policy.store else 0
        turn.compute_left = turn.prompt_tokens - (hits + turn.loaded_blocks) * self.block_size
        turn.computed_tokens = turn.compute_left
        self.recomputed_tokens += max(0, turn.prior_tokens - (hits + turn.loaded_blocks) * self.block_size)
        if turn.loaded_blocks:
            self._loading.append(turn)
            self.loaded_blocks += turn.loaded_blocks
            self.link.send(turn.loaded_blocks * self.block_bytes, lambda: self._loaded(turn), owner=self.engine_id)
        else:
            self._prefilling.append(turn)

    def _loaded(self, turn: AwareTurn) -> None:
        self._loading.remove(turn)
        self._prefilling.append(turn)
        self._kick()

    def _kick(self) -> None:
        if self._busy or not (self._prefilling or self._decoding):
            return
        budget = self.chunk_tokens
        chunks: list[tuple[AwareTurn, int]] = []
        duration = 0.0
        for turn in self._prefilling:
            if budget <= 0:
                break
            take = min(turn.compute_left, budget)
            budget -= take
            duration += self.cost.prefill_s(turn.prompt_tokens - turn.compute_left, take)
            chunks.append((turn, take))
        decoding = list(self._decoding)
        if decoding:
            duration += self.cost.decode_step_s([t.prompt_tokens + t.emitted for t in decoding])
        self._busy = True
        self.busy_s += duration
        self.loop.after(duration, lambda: self._iterated(chunks, decoding))

    def _iterated(self, chunks: list[tuple[AwareTurn, int]], decoding: list[AwareTurn]) -> None:
        self._busy = False
        now = self.loop.now()
        for turn in decoding:
            turn.emitted += 1
            turn.last_token_s = now
            if turn.emitted >= turn.output_tokens:
                self._decoding.remove(turn)
                self._finish(turn)
        for turn, take in chunks:
            turn.compute_left -= take
            if turn.compute_left == 0:
                self._prefilling.remove(turn)
                turn.first_token_s = turn.last_token_s = now
                turn.emitted = 1
                if turn.emitted >= turn.output_tokens:
                    self._finish(turn)
                else:
                    self._decoding.append(turn)
        self._admit()
        self._kick()

    def _finish(self, turn: AwareTurn) -> None:
        self._account()
        for slot, block_id in zip(turn.slots, turn.block_ids, strict=False):
            self.blocks.seal(slot, block_id)
        if turn.critical and self.policy.eviction == "hinted":
            # As the engine hints a finished sequence's blocks with its priority.
            self.hint(turn.block_ids, Hint(priority=CRITICAL_PRIORITY))
        self.blocks.free(turn.slots)
        now = self.loop.now()
        for block_id in turn.block_ids:
            if not block_id.startswith(PREFIX):
                self._cached_since.setdefault(block_id, now)
        turn.slots = []
        turn.done_s = now
        self.on_done(turn)

    def _account(self, until_s: float | None = None) -> None:
        """Add the slot-seconds since the last change to the used area: slots referenced by turns
        and transfers in flight, not the lifecycle's pins (idle KV counts when it is hit again)."""
        now = self.loop.now() if until_s is None else max(self.loop.now(), until_s)
        used = self.blocks.num_slots - self.blocks.num_free_slots - self.held_slots
        self.used_area += used * (now - self._area_at)
        self._area_at = now

    def finish_accounting(self, until_s: float) -> None:
        self._account(until_s)
