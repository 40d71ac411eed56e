"""Turn queues: in which order waiting turns of several tenants start, and whose turn gives way.

Admission (`admission.py`) lets `max_running` turns run on the engines at once; the others wait
here, and each freed slot goes to the turn `pop` names. When the queue is full, `shed` names the
tenant whose newest waiting turn is refused (HTTP 429 / RESOURCE_EXHAUSTED) to make room.

    wfq    weighted fair queuing across tenants, by start tags (SFQ: Goyal, Vin and Cheng 1996): a
           turn's start tag is max(V, its tenant's last finish tag), its finish tag that plus
           cost / weight, and V the start tag of the turn that started last; the smallest start
           tag starts first (ties: arrival order). Backlogged tenants start turns in proportion to
           their weights; a tenant under its share starts at the next free slot, whatever another
           tenant's backlog. A full queue sheds the tenant holding the most waiting turns per unit
           of weight, so a flooding tenant is refused before others wait.
    fifo   one queue in arrival order; a full queue refuses the turn that arrives.

Weights come from the keys file (`common/api_keys.py`); a tenant without one weighs 1. Tags are
kept per waiting turn, so a withdrawn turn (its client left) takes its cost back from the turns of
its tenant behind it.
"""

from __future__ import annotations

import itertools
from collections import deque
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Generic, Literal, Protocol, TypeVar

from agentserve.common.config import check_choice

T = TypeVar("T")
FairnessName = Literal["wfq", "fifo"]
DEFAULT_WEIGHT = 1.0


class TurnQueue(Protocol[T]):
    """Waiting turns of several tenants. Runs on the scheduler's event loop; no method waits."""

    name: str

    def __len__(self) -> int: ...

    def queued(self, tenant: str) -> int:
        """How many turns of `tenant` wait."""
        ...

    def push(self, tenant: str, item: T, cost: float = 1.0) -> None:
        """`item` waits behind `tenant`'s earlier turns."""
        ...

    def pop(self) -> T:
        """The turn that starts next (the queue must not be empty)."""
        ...

    def remove(self, tenant: str, item: T) -> bool:
        """Withdraw a waiting `item`; False if it no longer waits."""
        ...

    def shed(self, arriving: str) -> str:
        """With the queue full and a turn of `arriving` at the door: the tenant whose newest
        waiting turn is refused instead (`arriving` itself: the arriving turn is refused)."""
        ...

    def newest(self, tenant: str) -> T:
        """`tenant`'s most recently queued turn (it must have one)."""
        ...


@dataclass
class _Waiting(Generic[T]):
    item: T
    cost: float
    start: float
    arrival: int


@dataclass
class _Tenant(Generic[T]):
    weight: float
    waiting: deque[_Waiting[T]] = field(default_factory=deque)
    last_finish: float = 0.0


class WeightedFairQueue(Generic[T]):
    name = "wfq"

    def __init__(self, weights: Mapping[str, float] | None = None) -> None:
        self.weights = dict(weights or {})
        for tenant, weight in self.weights.items():
            if not weight > 0:
                raise ValueError(f"tenant {tenant!r}: weight must be positive, got {weight}")
        self.virtual_time = 0.0
        self._tenants: dict[str, _Tenant[T]] = {}
        self._arrivals = itertools.count()
        self._count = 0

    def __len__(self) -> int:
        return self._count

    def weight(self, tenant: str) -> float:
        return self.weights.get(tenant, DEFAULT_WEIGHT)

    def queued(self, tenant: str) -> int:
        state = self._tenants.get(tenant)
        return len(state.waiting) if state is not None else 0

    def push(self, tenant: str, item: T, cost: float = 1.0) -> None:
        state = self._tenants.get(tenant)
        if state is None:
            state = self._tenants[tenant] = _Tenant(self.weight(tenant))
        start = max(self.virtual_time, state.last_finish)
        state.waiting.append(_Waiting(item, cost, start, next(self._arrivals)))
        state.last_finish = start + cost / state.weight
        self._count += 1

    def pop(self) -> T:
        state = min(
            (s for s in self._tenants.values() if s.waiting),
            key=lambda s: (s.waiting[0].start, s.waiting[0].arrival),
        )
        head = state.waiting.popleft()
        self.virtual_time = head.start
        self._count -= 1
        # A tenant with nothing waiting whose last finish tag V has reached holds no state worth
        # keeping: its next turn starts from V either way.
        idle = [t for t, s in self._tenants.items() if not s.waiting and s.last_finish <= self.virtual_time]
        for tenant in idle:
            del self._tenants[tenant]
        return head.item

    def remove(self, tenant: str, item: T) -> bool:
        state = self._tenants.get(tenant)
        if state is None:
            return False
        found = [i for i, waiting in enumerate(state.waiting) if waiting.item is item]
        if not found:
            return False
        index = found[0]
        waiting = state.waiting[index]
        del state.waiting[index]
        refund = waiting.cost / state.weight
        for later in itertools.islice(state.waiting, index, None):
            later.start -= refund
        state.last_finish -= refund
        self._count -= 1
        if not state.waiting and state.last_finish <= self.virtual_time:
            del self._tenants[tenant]
        return True

    def shed(self, arriving: str) -> str:
        def load(tenant: str) -> float:
            return (self.queued(tenant) + (tenant == arriving)) / self.weight(tenant)

        heaviest = max((t for t, s in self._tenants.items() if s.waiting), key=load, default=arriving)
        return arriving if load(arriving) >= load(heaviest) else heaviest

    def newest(self, tenant: str) -> T:
        return self._tenants[tenant].waiting[-1].item


class FifoQueue(Generic[T]):
    name = "fifo"

    def __init__(self, weights: Mapping[str, float] | None = None) -> None:
        self._waiting: deque[tuple[str, T]] = deque()

    def __len__(self) -> int:
        return len(self._waiting)

    def queued(self, tenant: str) -> int:
        return sum(1 for t, _ in self._waiting if t == tenant)

    def push(self, tenant: str, item: T, cost: float = 1.0) -> None:
        self._waiting.append((tenant, item))

    def pop(self) -> T:
        return self._waiting.popleft()[1]

    def remove(self, tenant: str, item: T) -> bool:
        for index, (_, waiting) in enumerate(self._waiting):
            if waiting is item:
                del self._waiting[index]
                return True
        return False

    def shed(self, arriving: str) -> str:
        return arriving

    def newest(self, tenant: str) -> T:
        return next(item for t, item in reversed(self._waiting) if t == tenant)


TURN_QUEUES: dict[str, type] = {q.name: q for q in (WeightedFairQueue, FifoQueue)}


def make_turn_queue(name: str, weights: Mapping[str, float] | None = None) -> TurnQueue:
    """The queue called `name` (wfq, fifo) with the tenants' `weights`; ValueError names the choices."""
    check_choice("fairness", name, FairnessName)
    queue: TurnQueue = TURN_QUEUES[name](weights)
    return queue
