"""The collaborators a `TurnRunner` calls, grouped as ports: the engines, the KV, the policy.

A capability only some deployments have (a store that deletes, engines that drop KV) is a port
typed `X | None`, set by the one who builds the runner (`SchedulerCore`); the runner never probes
its collaborators for methods.
"""

from __future__ import annotations

from collections.abc import AsyncGenerator, Callable
from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable

from agentserve.contracts import GenerateChunk, GenerateRequest, PrefillRequest, PrefillResult
from agentserve.scheduler.engine_clients import Metadata
from agentserve.scheduler.kv_ledger import KVLedger
from agentserve.scheduler.placement import GlobalScheduler
from agentserve.scheduler.registry import EngineRegistry
from agentserve.scheduler.rounds import RoundGroups
from agentserve.scheduler.sessions import Session
from agentserve.scheduler.turn_order import ArrivalOrder, TurnOrder


class StoreLookup(Protocol):
    async def lookup(self, block_ids: list[bytes]) -> int:
        """How many leading ids of the chain are stored."""
        ...


@runtime_checkable
class StoreDeletes(Protocol):
    async def delete(self, block_ids: list[bytes]) -> int:
        """Remove `block_ids` from the store; how many it held."""
        ...


class EngineCalls(Protocol):
    """The two engine calls a turn makes (`EngineClients`; fakes in unit tests)."""

    async def prefill(self, address: str, request: PrefillRequest, metadata: Metadata) -> PrefillResult: ...

    def generate(
        self, address: str, request: GenerateRequest, metadata: Metadata
    ) -> AsyncGenerator[GenerateChunk, None]: ...

    def forget(self, address: str) -> None: ...


class TurnCommits(Protocol):
    """Where a turn commits before it is recorded on the session (`SessionDirectory`: a
    compare-and-swap in etcd when state is shared), raising if it may not."""

    async def commit(
        self, session: Session, history: list[int], client_state: dict[str, Any] | None, ledger: KVLedger
    ) -> None: ...


@runtime_checkable
class KVDrops(Protocol):
    async def drop_kv(self, address: str, block_ids: list[bytes]) -> int: ...


@dataclass(frozen=True)
class EnginePorts:
    """Where a turn runs: the live engines, the calls to them, the placement over them, and the
    round groups that bring an all-gather round's turns to one prefill engine."""

    registry: EngineRegistry
    calls: EngineCalls
    placer: GlobalScheduler
    rounds: RoundGroups = field(default_factory=RoundGroups)


@dataclass(frozen=True)
class KVPorts:
    """Where a turn's KV is looked up and released.

    `drops`: set when sessions keep no KV on their decode engine between turns
    (`SchedulerConfig.session_kv = "store"`); each turn's decode engine then drops it at the end.
    `tail_blocks`: a turn's decode engine persists its context's partial last block and the next
    turn loads it (`tail_blocks` module); `deletes`, when set, removes the one before from the store."""

    store: StoreLookup
    drops: KVDrops | None = None
    tail_blocks: bool = False
    deletes: StoreDeletes | None = None


def callers_priority(session: Session) -> int:
    """The scheduling priority the session's caller gave it."""
    return session.info.priority


@dataclass(frozen=True)
class TurnPolicy:
    """How turns are served: engine failures a turn moves past (`retries`), the priority a session's
    requests carry to the engines (`agent_priority.priority_of` in the scheduler), and the rank of a
    session's turn among its engine's waiting turns of equal priority (`turn_order` module)."""

    retries: int = 1
    priority_of: Callable[[Session], int] = callers_priority
    turn_order: TurnOrder = field(default_factory=ArrivalOrder)
