"""GlobalScheduler: DualPath's three questions for one turn, each answered by a pluggable policy.

1. Which prefill engine (`PrefillPolicy`: least-loaded, or DualPath's read-queue/token rule).
2. Which decode engine: the session's KV holder while it is alive (it already holds the history),
   else the router's choice, or the path-B relay when it is as lightly loaded and its policy says
   the decode engine may follow it.
3. How store hits reach the prefill: the decode engine that would relay path B (`RelayPolicy`),
   then the path (`PathPolicy`: A, B, the shorter read queue, or a split by free bandwidth).

The answer is a `Placement` that records why (span attributes, metrics), and whose `reserve` counts
the work against the chosen engines until the prefill returns, so the next turn sees it before any
heartbeat does.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass
from typing import TYPE_CHECKING

from agentserve.common.errors import RetryableError
from agentserve.contracts import KVPath, LoadPlan, Role
from agentserve.scheduler.paths import DualPathPolicy, PathPolicy
from agentserve.scheduler.prefill_policy import LeastLoadedPrefill, PrefillChoice, PrefillPolicy
from agentserve.scheduler.registry import Engine, EngineRegistry
from agentserve.scheduler.relay_policy import RelayPolicy, TurnDecodeRelay
from agentserve.scheduler.router import Router

if TYPE_CHECKING:
    from agentserve.scheduler.sessions import Session


@dataclass(frozen=True)
class Placement:
    prefill: Engine
    decode: Engine
    relay: Engine | None  # the path-B reader; None on path A
    plan: LoadPlan
    hit_blocks: int  # store blocks the prefill reads: the leading hits, and a stored tail after them
    new_tokens: int  # prompt tokens left to compute after the store hits
    persist_blocks: int  # full prompt blocks past the hits: the prefill writes them to the store
    prefill_reason: str
    relay_reason: str  # "" on path A
    # Leading hit blocks the relay sends from its HBM (`relay_source=hbm-first` only; else 0: it
    # reads every block it relays from the store).
    relay_held_blocks: int = 0

    @property
    def relay_store_blocks(self) -> int:
        """Path-B blocks the relay reads from the store: the relayed ones (the last of the hits)
        it does not send from its HBM."""
        relayed_from = self.hit_blocks - self.relay_blocks
        return self.relay_blocks - max(0, min(self.relay_held_blocks, self.hit_blocks) - relayed_from)

    @property
    def relay_blocks(self) -> int:
        """Store hits planned for path B."""
        return {KVPath.A: 0, KVPath.B: self.hit_blocks, KVPath.SPLIT: self.plan.relay_blocks}[self.plan.path]

    @property
    def split_fraction(self) -> float:
        """The planned share of the store hits read by path B (0 without hits)."""
        return self.relay_blocks / self.hit_blocks if self.hit_blocks else 0.0

    def attributes(self) -> dict[str, str | int | float]:
        """The decision and its reasons, as the turn span's attributes."""
        return {
            "turn.placement.prefill_engine": self.prefill.engine_id,
            "turn.placement.prefill_reason": self.prefill_reason,
            "turn.placement.prefill_unfinished_tokens": self.prefill.unfinished_prefill_tokens,
            "turn.placement.prefill_snic_queue_bytes": self.prefill.snic_queue_bytes,
            "turn.placement.decode_engine": self.decode.engine_id,
            "turn.placement.kv_path": self.plan.path.value,
            "turn.placement.relay_engine": self.relay.engine_id if self.relay else "",
            "turn.placement.relay_reason": self.relay_reason,
            "turn.placement.relay_snic_queue_bytes": self.relay.snic_queue_bytes if self.relay else 0,
            "turn.placement.relay_blocks": self.relay_blocks,
            "turn.placement.split_fraction": self.split_fraction,
        }

    @contextmanager
    def reserve(self, registry: EngineRegistry, block_bytes: int) -> Iterator[None]:
        """Count this turn's work against its engines while the block runs: the tokens to compute
        on the prefill, path A's reads on its snic, path B's reads on the relay's snic and sends on
        its cnic. The prefill's persist of the blocks it computes goes over its snic too, so it
        counts in that NIC's recent load (which balances the storage NICs), though not as a read.
        The relay's snic counts the blocks it reads from the store (`relay_store_blocks`)."""
        relayed = self.relay_blocks * block_bytes
        with ExitStack() as stack:
            stack.enter_context(
                registry.plan(
                    self.prefill,
                    snic_bytes=(self.hit_blocks - self.relay_blocks) * block_bytes,
                    prefill_tokens=self.new_tokens,
                    snic_write_bytes=self.persist_blocks * block_bytes,
                )
            )
            if self.relay is not None:
                stack.enter_context(
                    registry.plan(self.relay, snic_bytes=self.relay_store_blocks * block_bytes, cnic_bytes=relayed)
                )
            yield


class GlobalScheduler:
    def __init__(
        self,
        registry: EngineRegistry,
        router: Router,
        prefill_policy: PrefillPolicy | None = None,
        relay_policy: RelayPolicy | None = None,
        path_policy: PathPolicy | None = None,
    ) -> None:
        self.registry = registry
        self.router = router
        self.prefill_policy = prefill_policy or LeastLoadedPrefill()
        self.relay_policy = relay_policy or TurnDecodeRelay()
        self.path_policy = path_policy or DualPathPolicy()

    def place(
        self,
        session: Session,
        prompt_tokens: int,
        hit_blocks: int,
        prefill_engine: str | None = None,
        held: Callable[[Engine], int] | None = None,
        tail_tokens: int = 0,
    ) -> Placement:
        """Engines and load plan for a turn of `prompt_tokens` whose first `hit_blocks` blocks are
        in the store, and after them, if `tail_tokens`, a stored tail of that many tokens: one more
        block to read, by the same path (the placement's `hit_blocks` counts it). `prefill_engine`
        (an all-gather round's engine, which holds the round's shared masters) is taken while
        alive, else the policy picks. `held(d)`: how many leading
        hit blocks decode engine `d` holds already, besides the session's KV holder, which holds
        them all; read only under `relay_source=hbm-first` (a relay then sends those from HBM).
        RetryableError when a role has no alive engine."""
        alive = self._alive(Role.PREFILL)
        pinned = next((e for e in alive if e.engine_id == prefill_engine), None)
        prefill = PrefillChoice(pinned, "round") if pinned is not None else self.prefill_policy.pick(alive)
        holder = self._holder(session)
        decode = holder or self.pick(Role.DECODE, session)
        block_size = self.registry.block_size or 1
        new_tokens = max(0, prompt_tokens - hit_blocks * block_size - tail_tokens)
        persist_blocks = max(0, prompt_tokens // block_size - hit_blocks)
        hit_blocks += 1 if tail_tokens else 0  # from here on: the blocks read from the store
        relay, held_blocks = None, {}
        if hit_blocks:
            block_bytes = prefill.engine.status.kv_block_bytes or decode.status.kv_block_bytes
            decodes = self._alive(Role.DECODE)
            if self.relay_policy.hbm_first:
                held_blocks = {d.engine_id: self._held_hits(d, holder, hit_blocks, held) for d in decodes}
            held_bytes = {engine_id: blocks * block_bytes for engine_id, blocks in held_blocks.items()}
            relay = self.relay_policy.pick(decodes, decode, hit_blocks * block_bytes, held_bytes)
        plan = self.path_policy.choose(prefill.engine, relay.engine if relay else decode, hit_blocks)
        if plan.relayed and self.relay_policy.hbm_first:
            plan = dataclasses.replace(plan, relay_hbm_first=True)
        if (
            relay is not None
            and plan.path is not KVPath.A
            and holder is None
            and self.relay_policy.decode_follows_relay
            and relay.engine.load <= decode.load
        ):
            # As lightly loaded as the router's choice, the relay decodes the turn as well: it keeps
            # what it relays, so the handoff after the prefill skips those blocks (the paper's relay
            # is the turn's decode engine).
            decode = relay.engine
        if relay is None or plan.path is KVPath.A:
            return Placement(
                prefill.engine, decode, None, plan, hit_blocks, new_tokens, persist_blocks, prefill.reason, ""
            )
        return Placement(
            prefill.engine,
            decode,
            relay.engine,
            plan,
            hit_blocks,
            new_tokens,
            persist_blocks,
            prefill.reason,
            relay.reason,
            held_blocks.get(relay.engine.engine_id, 0),
        )

    @staticmethod
    def _held_hits(d: Engine, holder: Engine | None, hit_blocks: int, held: Callable[[Engine], int] | None) -> int:
        """Leading hits decode engine `d` would send from its HBM: all of them on the session's KV
        holder (it keeps the history between turns), else what `held` says (other turns' claims)."""
        if holder is not None and d.engine_id == holder.engine_id:
            return hit_blocks
        return min(hit_blocks, held(d)) if held is not None else 0

    def pick(self, role: Role, session: Session | None) -> Engine:
        """The router's choice among the alive engines of `role`."""
        return self.router.pick(self._alive(role), session)

    def _alive(self, role: Role) -> list[Engine]:
        engines = self.registry.alive(role)
        if not engines:
            raise RetryableError(f"no healthy {role.value} engine")
        return engines

    def _holder(self, session: Session) -> Engine | None:
        """The session's KV holder while it is alive (sticky: it already holds the history's blocks)."""
        if session.kv_holder:
            for engine in self.registry.alive(Role.DECODE):
                if engine.engine_id == session.kv_holder:
                    return engine
        return None
