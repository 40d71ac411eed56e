"""TurnKV: a turn's KV outside the engines' own caches: its store hits, the history's stored tail,
the claims that keep its blocks on its decode engine, and their release when the turn ends.

One per `TurnRunner`; the per-turn state lives on the `RunningTurn` (`prompt_blocks`, `claim`,
`context_tail`, `tail_tokens`). A lookup, a delete or a drop that fails costs compute, store space
or pool space, never tokens: each is logged and the turn goes on.
"""

from __future__ import annotations

import asyncio
import logging
import time

from opentelemetry import trace

from agentserve.kv.block_hash import block_ids_for
from agentserve.scheduler import metrics
from agentserve.scheduler.decode_claims import DecodeClaims
from agentserve.scheduler.registry import Engine, EngineRegistry
from agentserve.scheduler.running_turn import RunningTurn
from agentserve.scheduler.tail_blocks import Tail, context_tail
from agentserve.scheduler.turn_ports import KVPorts
from agentserve.scheduler.turn_telemetry import phase

log = logging.getLogger(__name__)


class TurnKV:
    def __init__(self, ports: KVPorts, registry: EngineRegistry) -> None:
        self.ports = ports
        self.registry = registry  # the block geometry, once an engine registered
        self.claims = DecodeClaims()  # with `drops`: what turns in flight need on their decode engine

    async def store_hits(self, turn: RunningTurn) -> int:
        """How many of the prompt's leading blocks the store holds; sets the turn's blocks and, when
        the hits are all of the history's full blocks and its tail is stored, the tail to load."""
        block_size, fingerprint = self.registry.block_size, self.registry.fingerprint
        if block_size is None or fingerprint is None:  # no engine ever registered: nothing can be stored
            return 0
        ids = block_ids_for(turn.prompt, block_size, fingerprint, turn.session.tenant)
        turn.prompt_blocks = ids
        if not ids:
            return 0
        try:
            with trace.use_span(turn.span, end_on_exit=False):
                hits = min(await self.ports.store.lookup(ids), len(ids))
        except Exception as exc:  # noqa: BLE001 - a lookup only saves compute: without it, prefill computes all
            log.warning("KV store lookup failed, prefilling without store hits: %s", exc)
            return 0
        metrics.PROMPT_BLOCKS.inc(len(ids))
        metrics.STORE_HIT_BLOCKS.inc(hits)
        turn.context_tail = tail = self._context_tail(turn, ids, block_size, fingerprint)
        if tail is not None and hits == tail.full_blocks and await self._stored(turn, tail):
            turn.tail_tokens = tail.tokens
            turn.span.set_attribute("turn.store_tail_tokens", tail.tokens)
        return hits

    def _context_tail(self, turn: RunningTurn, ids: list[bytes], block_size: int, fingerprint: str) -> Tail | None:
        """The session history's tail, when the turn may load one (not beside reused shared blocks)."""
        if not self.ports.tail_blocks or turn.segments is not None:
            return None
        history = len(turn.session.history)
        return context_tail(turn.prompt, history, ids, block_size, fingerprint, turn.session.tenant)

    async def _stored(self, turn: RunningTurn, tail: Tail) -> bool:
        try:
            with trace.use_span(turn.span, end_on_exit=False):
                return await self.ports.store.lookup([tail.block_id]) == 1
        except Exception as exc:  # noqa: BLE001 - like the hits' lookup: without it, the tail is computed
            log.warning("KV store lookup of a tail failed, computing it: %s", exc)
            return False

    def held(self, turn: RunningTurn, hits: int, engine: Engine) -> int:
        """Leading store hits of `turn` that other turns in flight claim on decode `engine`."""
        return self.claims.held_prefix(engine.address, turn.prompt_blocks[:hits])

    def claim(self, turn: RunningTurn, address: str) -> None:
        """With `drops`: the turn's prompt blocks are claimed on the decode engine at `address`
        (moved there from an earlier one), so other turns' drops leave them alone."""
        if self.ports.drops is None:
            return
        self.unclaim(turn)
        turn.claim = (address, turn.prompt_blocks)
        self.claims.claim(address, turn.prompt_blocks)

    def unclaim(self, turn: RunningTurn) -> None:
        if turn.claim is not None:
            self.claims.release(*turn.claim)
            turn.claim = None

    async def release(self, turn: RunningTurn) -> None:
        """The history's tail is deleted from the store: the turn's decode engine persisted the new
        context's before its last token. With `drops`: the decode engine drops the turn's KV (its
        engine persisted it to the store before the last token) and both tails, and so does the
        turn's relay when another decode engine relayed its reads (a relay keeps what it relays);
        awaited so the session's next turn, wherever it decodes, finds it gone and reads the store."""
        await self._delete_context_tail(turn)
        block_size, fingerprint = self.registry.block_size, self.registry.fingerprint
        drops = self.ports.drops
        if drops is None or not turn.decode_address or block_size is None or fingerprint is None:
            return
        context = turn.prompt + turn.output
        ids = block_ids_for(context, block_size, fingerprint, turn.session.tenant)
        tails: list[bytes] = []
        if self.ports.tail_blocks:  # the one a relay kept there, and the one the decode engine cached
            new_tail = context_tail(context, len(context), ids, block_size, fingerprint, turn.session.tenant)
            tails = [tail.block_id for tail in (turn.context_tail, new_tail) if tail is not None]
        self.unclaim(turn)
        holders = [turn.decode_address]
        if turn.relay_address and turn.relay_address != turn.decode_address:
            holders.append(turn.relay_address)
        began = time.perf_counter()
        # Blocks other turns on an engine still need (every agent's prompt starts with the same
        # ones) stay there: dropped, the engine would recompute them (`DecodeClaims`).
        await asyncio.gather(
            *(self._drop(turn, address, self.claims.unclaimed(address, ids) + tails) for address in holders)
        )
        phase("release", turn.index, began)

    async def _drop(self, turn: RunningTurn, address: str, ids: list[bytes]) -> None:
        assert self.ports.drops is not None
        try:
            await self.ports.drops.drop_kv(address, ids)
        except Exception as exc:  # noqa: BLE001 - a block left behind costs pool space, never tokens
            log.warning("dropping turn %s's KV from %s failed: %s", turn.turn_id, address, exc)

    async def _delete_context_tail(self, turn: RunningTurn) -> None:
        """The history's tail is garbage once the turn completes (the next turn extends the new
        context); a delete that fails leaves it to the store's eviction."""
        deletes = self.ports.deletes if self.ports.tail_blocks else None
        if deletes is None or turn.context_tail is None:
            return
        try:
            await deletes.delete([turn.context_tail.block_id])
        except Exception as exc:  # noqa: BLE001 - a stale tail costs store space, never tokens
            log.warning("deleting session %s's old tail from the store failed: %s", turn.session.session_id, exc)
