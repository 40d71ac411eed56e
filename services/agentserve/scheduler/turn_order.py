"""Turn order: which of a prefill engine's waiting turns of equal priority goes first.

    arrival        first come, first served (every turn's rank 0: the engine's arrival order)
    least-served   the session with the fewest completed turns first (least attained service at
                   turn granularity, as Autellix's PLAS schedules agent programs): an agent that
                   fell behind catches up instead of queueing behind agents further ahead

Why: a job of many agents ends when its last agent does. Served in arrival order, an agent whose
turns happened to queue behind others' falls behind and stays behind, and at the end its turns
run one after another while the engines idle (docs/dualpath.md shows the straggler in `bench
dualpath`). Ranking by completed turns keeps the agents abreast, so the engines stay fed until the
end. Priority still comes first: the rank only orders equals.

The rank travels to the engine as `PrefillRequest.service_rank`; the engine queue orders by it
(`LLMEngine._enqueue`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Literal, Protocol

from agentserve.common.config import check_choice

if TYPE_CHECKING:  # the bench's argument parser imports the names alone
    from agentserve.scheduler.sessions import Session


class TurnOrder(Protocol):
    name: str

    def rank(self, session: Session) -> int:
        """The rank of `session`'s next turn among waiting turns of its priority (lower first)."""
        ...


class ArrivalOrder:
    name = "arrival"

    def rank(self, session: Session) -> int:
        return 0


class LeastServedOrder:
    name = "least-served"

    def rank(self, session: Session) -> int:
        return session.turns


TurnOrderName = Literal["arrival", "least-served"]
TURN_ORDERS: dict[str, type] = {o.name: o for o in (ArrivalOrder, LeastServedOrder)}


def make_turn_order(name: str) -> TurnOrder:
    """The order called `name` (arrival, least-served); ValueError names the choices."""
    check_choice("turn_order", name, TurnOrderName)
    order: TurnOrder = TURN_ORDERS[name]()
    return order
