"""EngineRegistry: which engines exist, their load, and the one model they all serve.

Engines register at start and heartbeat every interval; one silent for longer than the timeout is
dropped from routing, and one whose call failed is dropped at once (`mark_dead`). A dropped engine
that is still alive learns it from its next heartbeat (`known=False`) and registers again, so a
false alarm costs one heartbeat interval, not the engine.

Scale-in drains an engine: its status says `draining` (an operator's `drain`, or the engine's own
report after a SIGTERM), and from then on no new turn is placed on it (`alive` leaves it out) while
the work already sent there finishes (`alive(..., draining=True)` still counts it, for liveness and
the peers' allow-list). It leaves the registry by `deregister` once nothing this scheduler sent is
still on it (`Engine.busy`): the check and the removal happen in one step on the event loop, so no
placement can slip in between. The state is the engine's status, so a registry kept elsewhere (etcd)
carries it the same way.
"""

from __future__ import annotations

import dataclasses
import math
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field

from agentserve.common.errors import FailedPrecondition, NotFoundError
from agentserve.contracts import EngineStatus, Role
from agentserve.scheduler.nic_ledger import NICLedger


@dataclass
class Engine:
    """A registered engine: its last status, when it was last heard from, and what we sent it.

    Every load figure the policies read is the larger of what the last heartbeat reported (aged by
    what the NIC drained since) and what this scheduler routed here and is still waiting (bytes until
    the NIC would have moved them, tokens until the prefill returns): a report lags by up to a
    heartbeat, our own count does not, so a burst of turns between two heartbeats spreads instead of
    all following the same stale picture."""

    status: EngineStatus
    last_seen: float
    inflight: int = field(default=0)  # scheduler calls to it in progress, counted here, never stale
    snic: NICLedger = field(default_factory=NICLedger)  # store reads the scheduler routed here
    cnic: NICLedger = field(default_factory=NICLedger)  # path-B relay bytes routed through its compute NIC
    prefill_planned_tokens: int = field(default=0)  # tokens left to compute of prefills sent here
    # Work this scheduler sent here and that has not ended: calls (`track`), placements (`plan`),
    # turns placed here (`hold`). A draining engine deregisters only at 0.
    busy: int = field(default=0)
    clock: Callable[[], float] = field(default=time.monotonic, repr=False)  # the registry's, for last_seen

    @property
    def snic_queue_bytes(self) -> int:
        """Storage-NIC backlog now (see `queue_bytes`)."""
        return self.queue_bytes("snic")

    @property
    def cnic_queue_bytes(self) -> int:
        """Compute-NIC backlog now (see `queue_bytes`)."""
        return self.queue_bytes("cnic")

    def queue_bytes(self, nic_name: str) -> int:
        """A NIC's backlog now: the last heartbeat's queue less what the NIC drained since at its
        configured rate (a report can be a second old; most queues drain in milliseconds), or the
        backlog of the reads we routed here (`NICLedger.backlog`), if that is more."""
        nic = self.status.nic(nic_name)
        reported = nic.queue_bytes
        if reported and nic.configured_gbps > 0:
            drained = nic.configured_gbps * 1e9 / 8 * max(0.0, self.clock() - self.last_seen)
            reported = max(0, round(reported - drained))
        return max(reported, self.ledger(nic_name).backlog(self.bytes_per_s(nic_name), self.clock()))

    def recent_bytes(self, nic_name: str) -> float:
        """The read load this scheduler routed to the NIC lately (`NICLedger.recent_bytes`): policies
        break ties between equal queues by it, so idle NICs take turns."""
        return self.ledger(nic_name).recent_bytes(self.clock())

    def ledger(self, nic_name: str) -> NICLedger:
        return self.snic if nic_name == "snic" else self.cnic

    def bytes_per_s(self, nic_name: str) -> float:
        """The NIC's configured rate; infinite when unshaped (it never holds a queue)."""
        gbps = self.status.nic(nic_name).configured_gbps
        return gbps * 1e9 / 8 if gbps > 0 else math.inf

    def queue_s(self, nic_name: str) -> float:
        """How long the NIC's backlog takes to drain at its configured rate (0 when unshaped)."""
        return self.queue_bytes(nic_name) / self.bytes_per_s(nic_name)

    @property
    def unfinished_prefill_tokens(self) -> int:
        return max(self.status.unfinished_prefill_tokens, self.prefill_planned_tokens)

    @property
    def engine_id(self) -> str:
        return self.status.engine_id

    @property
    def address(self) -> str:
        return self.status.address

    @property
    def draining(self) -> bool:
        return self.status.draining

    def mark_draining(self) -> None:
        """No new turn is placed here from now on (until the engine registers afresh)."""
        self.status = dataclasses.replace(self.status, draining=True)

    @property
    def load(self) -> int:
        # The reported queue lags by up to a heartbeat; our own in-flight count does not, so a burst
        # of turns spreads over engines instead of all landing on the one that looked idle.
        return max(self.status.running + self.status.waiting, self.inflight)


class EngineRegistry:
    def __init__(self, timeout_s: float, clock: Callable[[], float] = time.monotonic) -> None:
        if timeout_s <= 0:
            raise ValueError(f"engine timeout must be positive, got {timeout_s}")
        self._timeout_s = timeout_s
        self._clock = clock
        self._engines: dict[str, Engine] = {}
        # Pinned by the first registration for the scheduler's lifetime: block ids computed for
        # routing and store lookups are only meaningful for one model and one block size.
        self._fingerprint: str | None = None
        self._block_size: int | None = None

    @property
    def fingerprint(self) -> str | None:
        return self._fingerprint

    @property
    def block_size(self) -> int | None:
        return self._block_size

    def register(self, status: EngineStatus) -> None:
        """Add or replace an engine. ValueError if it serves another model or block size."""
        if self._fingerprint is not None and status.model_fingerprint != self._fingerprint:
            # Only the engine's own fingerprint: the scheduler's is not told to whoever registers.
            raise ValueError(f"engine {status.engine_id} serves model {status.model_fingerprint}, not this scheduler's")
        if self._block_size is not None and status.block_size != self._block_size:
            raise ValueError(
                f"engine {status.engine_id} uses block size {status.block_size}, "
                f"but this scheduler uses {self._block_size}"
            )
        self._fingerprint, self._block_size = status.model_fingerprint, status.block_size
        engine = self._engines.get(status.engine_id)
        if engine is None:
            self._engines[status.engine_id] = Engine(status, self._clock(), clock=self._clock)
        else:  # updated in place: calls in flight still hold this object and will decrement it
            engine.status, engine.last_seen = status, self._clock()

    def heartbeat(self, status: EngineStatus) -> bool:
        """Refresh an engine's load; False if it is unknown (dropped, or the scheduler restarted)."""
        engine = self._engines.get(status.engine_id)
        if engine is None:
            return False
        if (status.model_fingerprint, status.block_size) != (self._fingerprint, self._block_size):
            # The engine restarted with another model under the same id: make it register again.
            del self._engines[status.engine_id]
            return False
        draining = engine.draining
        engine.status = status
        if draining:  # sticky: a heartbeat the engine sent before it heard of its drain does not undo it
            engine.mark_draining()
        engine.last_seen = self._clock()
        return True

    def find(self, name: str) -> Engine:
        """The registered engine whose id or address is `name` (draining ones too); NotFoundError
        naming the field and the registered ids."""
        if not name:
            raise ValueError("DrainEngineRequest.engine must name an engine (its id or host:port)")
        for engine in self._engines.values():
            if name in (engine.engine_id, engine.address):
                return engine
        known = ", ".join(sorted(self._engines)) or "none"
        raise NotFoundError(f"DrainEngineRequest.engine: no registered engine {name!r} (registered: {known})")

    def drain(self, name: str) -> Engine:
        """Mark the engine `name` (`find`) draining: no new turn is placed on it from now on.
        Idempotent. FailedPrecondition when it is the last engine of its role that takes turns."""
        engine = self.find(name)
        if not engine.draining:
            others = [e for e in self.alive(engine.status.role) if e is not engine]
            if not others:
                raise FailedPrecondition(
                    f"engine {engine.engine_id} is the last {engine.status.role.value} engine taking turns; "
                    "start another before draining it"
                )
            engine.mark_draining()
        return engine

    def deregister(self, status: EngineStatus) -> bool:
        """Remove a draining engine once nothing this scheduler sent is on it (marking it draining
        first if it was not); True when it is gone (or was never registered), False while busy."""
        engine = self._engines.get(status.engine_id)
        if engine is None:
            return True
        engine.mark_draining()
        if engine.busy:
            return False
        del self._engines[status.engine_id]
        return True

    def mark_dead(self, engine_id: str) -> bool:
        """Drop an engine whose call failed; True if it was registered."""
        return self._engines.pop(engine_id, None) is not None

    def expire(self) -> list[str]:
        """Drop engines silent for longer than the timeout; return their ids."""
        cutoff = self._clock() - self._timeout_s
        dead = [e.engine_id for e in self._engines.values() if e.last_seen < cutoff]
        for engine_id in dead:
            del self._engines[engine_id]
        return dead

    def alive(self, role: Role, *, draining: bool = False) -> list[Engine]:
        """Engines of `role` heard from within the timeout, by id (stale ones never route, even
        between `expire` sweeps): those that take new turns, and with `draining` also those
        finishing the turns they have."""
        cutoff = self._clock() - self._timeout_s
        return sorted(
            (
                e
                for e in self._engines.values()
                if e.status.role is role and e.last_seen >= cutoff and (draining or not e.draining)
            ),
            key=lambda e: e.engine_id,
        )

    def get(self, engine_id: str) -> Engine | None:
        return self._engines.get(engine_id)

    def limits(self) -> tuple[int, int] | None:
        """(vocab_size, max_context) every alive engine accepts, or None if there is no engine."""
        engines = self.alive(Role.PREFILL) + self.alive(Role.DECODE)
        if not engines:
            return None
        return (min(e.status.vocab_size for e in engines), min(e.status.max_context for e in engines))

    @contextmanager
    def track(self, engine: Engine) -> Iterator[None]:
        """Count a call to `engine` as in flight for the duration of the block."""
        engine.inflight += 1
        try:
            with self.hold(engine):
                yield
        finally:
            engine.inflight -= 1

    @contextmanager
    def hold(self, engine: Engine) -> Iterator[None]:
        """Keep `engine` registered while the block runs (a turn placed on it, between its calls):
        `deregister` waits for it. Unlike `track` it is not load the policies see."""
        engine.busy += 1
        try:
            yield
        finally:
            engine.busy -= 1

    @contextmanager
    def plan(
        self,
        engine: Engine | None,
        *,
        snic_bytes: int = 0,
        cnic_bytes: int = 0,
        prefill_tokens: int = 0,
        snic_write_bytes: int = 0,
    ) -> Iterator[None]:
        """Count work routed to `engine` (store reads on its snic, relay bytes on its cnic, tokens to
        prefill) for the duration of the block, so policies see it before the next heartbeat does.
        The bytes count as queued only until the NIC would have moved them (`NICLedger`); the tokens
        until the block ends; `snic_write_bytes` (the prefill's persist) only in the snic's recent load."""
        if engine is None:
            yield
            return
        engine.snic.route(snic_bytes, engine.bytes_per_s("snic"), self._clock())
        engine.snic.note_write(snic_write_bytes, self._clock())
        engine.cnic.route(cnic_bytes, engine.bytes_per_s("cnic"), self._clock())
        engine.prefill_planned_tokens += prefill_tokens
        try:
            with self.hold(engine):
                yield
        finally:
            engine.snic.release(snic_bytes, self._clock())
            engine.cnic.release(cnic_bytes, self._clock())
            engine.prefill_planned_tokens -= prefill_tokens
