"""Turn order: each policy's rank, the rank every prefill request of a turn carries, and the
setting's validation."""

from __future__ import annotations

import pytest

from agentserve.common.config import choices_of
from agentserve.contracts import SamplingParams
from agentserve.scheduler.config import SchedulerConfig
from agentserve.scheduler.sessions import Session
from agentserve.scheduler.turn_order import (
    TURN_ORDERS,
    ArrivalOrder,
    LeastServedOrder,
    TurnOrderName,
    make_turn_order,
)
from tests.unit.scheduler.fakes import collect, run

pytestmark = pytest.mark.unit


def test_least_served_ranks_by_completed_turns_and_arrival_ranks_all_alike() -> None:
    ahead, behind = Session("a"), Session("b")
    ahead.turns, behind.turns = 7, 2
    least = make_turn_order("least-served")
    assert isinstance(least, LeastServedOrder)
    assert (least.rank(ahead), least.rank(behind)) == (7, 2)
    arrival = make_turn_order("arrival")
    assert isinstance(arrival, ArrivalOrder)
    assert (arrival.rank(ahead), arrival.rank(behind)) == (0, 0)
    assert tuple(TURN_ORDERS) == choices_of(TurnOrderName) == ("arrival", "least-served")


def test_an_unknown_turn_order_names_the_choices() -> None:
    with pytest.raises(ValueError, match="turn_order must be one of arrival, least-served, got 'fair'"):
        make_turn_order("fair")
    with pytest.raises(ValueError, match="turn_order must be one of arrival, least-served, got 'fair'"):
        SchedulerConfig(http_port=0, turn_order="fair")


@pytest.mark.parametrize(("order", "expected"), [("least-served", [0, 1, 2, 0]), ("arrival", [0, 0, 0, 0])])
def test_every_prefill_request_carries_its_sessions_rank(make_core, engines, order, expected) -> None:
    core = make_core(turn_order=order)
    sampling = SamplingParams(max_tokens=3)

    async def go():
        first = await core.open_session()
        for tokens in ([5, 6], [7], [8]):
            await collect(core.turn(first, token_ids=tokens, sampling=sampling))
        second = await core.open_session()  # a new agent: nothing served yet, first in line
        await collect(core.turn(second, token_ids=[9, 10], sampling=sampling))

    run(go())
    assert [request.service_rank for _, request, _ in engines.prefills] == expected
