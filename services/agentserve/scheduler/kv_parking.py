"""KVParking: moves a session's KV out of a decode engine while it waits on a tool, and back.

Driven by the tool proxy's events (through `SchedulerCore`), decided by a `LifecyclePolicy`:

- ToolCallStarted, the session's first pending call: predict the wait (`ToolDurationModel`); if
  the policy says offload, drop the session's blocks from its KV holder's pool (DropKV: the store
  already has them, the turn that made them persisted them), or demote them there (HintKV with
  the predicted return: a `hinted` pool evicts them first, in order of next use, but only when it
  needs the room), and hint the store when they will be read again; then, at the planned time,
  upload them (PrefetchKV: only the blocks the engine lacks move) into the decode engine chosen
  for the next turn (cluster-wide: the holder while it is alive and no busier than the router's
  pick, else that pick; on one engine's view, the one they left), which becomes the session's KV
  holder, and pin them there until the predicted return (HintKV). If the policy says pin
  instead, the holder holds them for the planned time (HintKV).
- ToolCallFinished, the last pending call: learn the duration; an upload not yet begun is
  cancelled (the return was early) and the next turn loads what it needs on demand.

Nothing here is needed for correctness: a turn always asks the decode engine which blocks it
holds (handoff) and loads or recomputes the rest, so a wrong prediction, a failed move or a
turn racing an upload costs time, never tokens.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Protocol, runtime_checkable

from agentserve.contracts import EngineUnavailable, KVHint, Role, ToolCall
from agentserve.kv.block_hash import block_ids_for
from agentserve.scheduler import metrics
from agentserve.scheduler.kv_lifecycle import LifecyclePolicy, ParkPlan
from agentserve.scheduler.registry import Engine, EngineRegistry
from agentserve.scheduler.sessions import Session
from agentserve.scheduler.tool_durations import ToolDurationModel

log = logging.getLogger(__name__)

# The quantile of a tool's durations read as "how early may it be back" (the upload's deadline).
EARLY_QUANTILE = 0.1


@runtime_checkable
class KVMoves(Protocol):
    """The decode-engine calls parking makes (`EngineClients`; fakes in unit tests)."""

    async def drop_kv(self, address: str, block_ids: list[bytes]) -> int: ...

    async def prefetch_kv(self, address: str, block_ids: list[bytes]) -> tuple[int, int]: ...

    async def hint_kv(self, address: str, block_ids: list[bytes], hint: KVHint) -> int: ...


@runtime_checkable
class StoreHints(Protocol):
    async def hint(
        self, block_ids: list[bytes], priority: int | None = None, next_use_in_s: float | None = None
    ) -> int: ...


@dataclass
class ParkingStats:
    offloads: int = 0
    demoted: int = 0  # offloads that left the KV resident, first to go when the pool needs room
    kept: int = 0
    pinned: int = 0  # kept and held in the holder's pool for the predicted wait
    uploads: int = 0
    uploads_cancelled: int = 0  # the session came back before its upload began
    dropped_blocks: int = 0
    uploaded_blocks: int = 0
    failures: int = 0


@dataclass
class _Parked:
    source: str  # the engine the KV was dropped from
    block_ids: list[bytes]
    turns: int  # the session's turn count when parked: a later turn makes the plan moot
    plan: ParkPlan
    task: asyncio.Task | None = None
    uploading: bool = False


class KVParking:
    def __init__(
        self,
        policy: LifecyclePolicy,
        durations: ToolDurationModel,
        registry: EngineRegistry,
        moves: KVMoves | None,
        store: StoreHints | None,
        pick_decode: Callable[[list[Engine], Session], Engine],
        sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
        priority_of: Callable[[Session], int] | None = None,
    ) -> None:
        """`priority_of`: the priority hints carry (`agent_priority.priority_of`; default the caller's)."""
        self.policy = policy
        self.durations = durations
        self.registry = registry
        self.moves = moves
        self.store = store
        self.pick_decode = pick_decode
        self._sleep = sleep
        self.priority_of = priority_of or (lambda session: session.info.priority)
        self._parked: dict[str, _Parked] = {}  # by session id
        self._pins: set[asyncio.Task] = set()  # pin and hint requests in flight (a reference keeps each alive)
        self.stats = ParkingStats()

    def parked(self, session_id: str) -> bool:
        return session_id in self._parked

    def started(self, session: Session, call: ToolCall) -> None:
        """A call of `session` started (already recorded in `session.tools`)."""
        if len(session.tools.pending) != 1 or session.session_id in self._parked or session.lock.locked():
            return  # parallel calls: parked at the first; a turn running: its KV is in use
        if self.moves is None:
            return
        holder = self._holder(session)
        ids = self._block_ids(session)
        if holder is None or not ids:
            return
        typical = self.durations.predict(call.tool, 0.5, call.caller_predicted_s, call.predicted_duration_s)
        early = self.durations.predict(call.tool, EARLY_QUANTILE, call.caller_predicted_s, call.predicted_duration_s)
        plan = self.policy.on_tool_started(typical, early, len(ids))
        if not plan.offload:
            self.stats.kept += 1
            metrics.KV_PARKING.labels("keep").inc()
            if plan.pin_s > 0:
                task = asyncio.get_running_loop().create_task(self._pin(session, holder, ids, plan.pin_s))
                self._pins.add(task)
                task.add_done_callback(self._pins.discard)
            return
        parked = self._parked[session.session_id] = _Parked(holder.engine_id, ids, session.turns, plan)
        parked.task = asyncio.get_running_loop().create_task(self._park(session, parked, holder, typical))

    def finished(self, session: Session, call: ToolCall) -> None:
        """A call of `session` finished (already recorded in `session.tools`)."""
        if call.ok and call.actual_duration_s > 0:
            self.durations.observe(call.tool, call.actual_duration_s)
        if session.tools.waiting:
            return
        parked = self._parked.pop(session.session_id, None)
        if parked is not None and parked.task is not None and not parked.uploading and not parked.task.done():
            parked.task.cancel()  # early: the next turn loads on demand
            self.stats.uploads_cancelled += 1
            metrics.KV_PARKING.labels("upload_cancelled").inc()

    def closed(self, session: Session) -> None:
        """`session` was closed: its KV has no future turn. A parking plan is moot, and the holder
        is told its blocks no longer carry the session's priority nor an expected next use (HintKV
        priority 0, next use now): engines hint a finished sequence's blocks with its priority, a
        demoted session's with its predicted return, and a `hinted` pool would otherwise keep a
        closed session's KV ahead of every live lower-priority or parked session's."""
        parked = self._parked.pop(session.session_id, None)
        if parked is not None and parked.task is not None:
            parked.task.cancel()
        holder = self._holder(session)
        ids = self._block_ids(session)
        if self.moves is None or holder is None or not ids:
            return
        task = asyncio.get_running_loop().create_task(self._forget(session, holder, ids))
        self._pins.add(task)
        task.add_done_callback(self._pins.discard)

    async def _forget(self, session: Session, holder: Engine, block_ids: list[bytes]) -> None:
        assert self.moves is not None  # closed() checked
        try:
            await self.moves.hint_kv(holder.status.address, block_ids, KVHint(priority=0, next_use_in_s=0.0))
        except Exception as exc:  # noqa: BLE001 - a stale priority costs pool space, never tokens
            log.warning("KV hint for closed session %s failed: %s", session.session_id, exc)

    async def aclose(self) -> None:
        tasks = [p.task for p in self._parked.values() if p.task is not None] + list(self._pins)
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        self._parked.clear()

    async def _pin(self, session: Session, holder: Engine, block_ids: list[bytes], pin_s: float) -> None:
        assert self.moves is not None  # started() checked
        try:
            await self.moves.hint_kv(holder.status.address, block_ids, KVHint(pin_s=pin_s))
        except Exception as exc:  # noqa: BLE001 - an unpinned block costs at most a reload, never tokens
            self.stats.failures += 1
            metrics.KV_PARKING.labels("failure").inc()
            log.warning("KV pin of session %s failed: %s", session.session_id, exc)
            return
        self.stats.pinned += 1
        metrics.KV_PARKING.labels("pin").inc()

    async def _park(self, session: Session, parked: _Parked, holder: Engine, typical_s: float) -> None:
        loop = asyncio.get_running_loop()
        start = loop.time()
        upload_after_s = parked.plan.upload_after_s
        try:
            assert self.moves is not None  # started() checked
            if parked.plan.drop:
                dropped = await self.moves.drop_kv(holder.status.address, parked.block_ids)
                self.stats.dropped_blocks += dropped
                metrics.KV_PARKING_BLOCKS.labels("dropped").inc(dropped)
            else:
                hint = KVHint(self.priority_of(session), typical_s)
                await self.moves.hint_kv(holder.status.address, parked.block_ids, hint)
                self.stats.demoted += 1
                metrics.KV_PARKING.labels("demote").inc()
            self.stats.offloads += 1
            metrics.KV_PARKING.labels("offload").inc()
            if self.store is not None:
                await self.store.hint(parked.block_ids, self.priority_of(session), typical_s)
            if upload_after_s is None:
                return
            await self._sleep(max(0.0, upload_after_s - (loop.time() - start)))
            parked.uploading = True
            if session.turns != parked.turns or session.lock.locked() or session.closed:
                return  # a turn came first and loaded what it needed
            target, loaded = await self._upload(session, parked)
            if target is None:
                return
            self.stats.uploads += 1
            self.stats.uploaded_blocks += loaded
            metrics.KV_PARKING.labels("upload").inc()
            metrics.KV_PARKING_BLOCKS.labels("uploaded").inc(loaded)
            if session.turns == parked.turns and not session.lock.locked():
                session.kv_holder = target.engine_id  # the next turn goes where its KV now is
            # Held until the predicted return; a late one finds them cached at the session's priority.
            remaining_s = max(0.0, typical_s - (loop.time() - start))
            hint = KVHint(self.priority_of(session), remaining_s, remaining_s)
            await self.moves.hint_kv(target.status.address, parked.block_ids, hint)
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # noqa: BLE001 - a failed move costs time, never tokens: the turn loads on demand
            self.stats.failures += 1
            metrics.KV_PARKING.labels("failure").inc()
            log.warning("KV parking of session %s failed: %s", session.session_id, exc)
        finally:
            if self._parked.get(session.session_id) is parked and parked.uploading:
                del self._parked[session.session_id]

    async def _upload(self, session: Session, parked: _Parked) -> tuple[Engine | None, int]:
        """Prefetch into the engine chosen cluster-wide among the alive decode engines (or the
        engine the KV left, on one engine's view: none if it is gone); one found gone (dead but not
        yet expired from the registry) is passed over for the next choice."""
        assert self.moves is not None
        block_ids = parked.block_ids
        candidates = self.registry.alive(Role.DECODE)
        if parked.plan.upload_to == "source":
            candidates = [e for e in candidates if e.engine_id == parked.source]
        while candidates:
            target = self._upload_target(candidates, session, parked)
            try:
                loaded, _ = await self.moves.prefetch_kv(target.status.address, block_ids)
            except EngineUnavailable as exc:
                log.warning("KV upload of session %s: %s; trying another engine", session.session_id, exc)
                candidates = [e for e in candidates if e is not target]
                continue
            return target, loaded
        return None, 0

    def _upload_target(self, candidates: list[Engine], session: Session, parked: _Parked) -> Engine:
        """The router's pick, unless the KV was only demoted and the engine it is on is no busier:
        that one still holds what the pool did not need, so less moves."""
        pick = self.pick_decode(candidates, session)
        if parked.plan.drop:
            return pick
        source = next((e for e in candidates if e.engine_id == parked.source), None)
        return source if source is not None and source.load <= pick.load else pick

    def _holder(self, session: Session) -> Engine | None:
        for engine in self.registry.alive(Role.DECODE):
            if engine.engine_id == session.kv_holder:
                return engine
        return None

    def _block_ids(self, session: Session) -> list[bytes]:
        block_size, fingerprint = self.registry.block_size, self.registry.fingerprint
        if block_size is None or fingerprint is None or not session.history:
            return []
        return block_ids_for(session.history, block_size, fingerprint, session.tenant)
