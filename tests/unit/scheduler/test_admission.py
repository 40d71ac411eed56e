"""Admission: the in-flight bounds, the per-tenant token bucket with the exact Retry-After, and the
queue of turns past `max_running`: the exact order they start in, whose turn is shed, and what a
caller that leaves while waiting gives back."""

from __future__ import annotations

import asyncio

import pytest

from agentserve.common.errors import Overloaded
from agentserve.scheduler.admission import Admission, AdmissionLimits
from agentserve.scheduler.fair_queue import FifoQueue, WeightedFairQueue

pytestmark = pytest.mark.unit


def admit(admission: Admission, tenant: str):
    """A ticket of a turn that runs at once (no slot to wait for)."""
    return asyncio.run(admission.admit(tenant))


def test_in_flight_bounds_per_tenant_and_in_all() -> None:
    admission = Admission(AdmissionLimits(max_inflight=3, max_inflight_per_tenant=2))
    a1, a2 = admit(admission, "a"), admit(admission, "a")
    with pytest.raises(Overloaded, match="tenant 'a' is at its limit of 2 turns in flight") as err:
        admit(admission, "a")
    assert err.value.retry_after == "1"
    b1 = admit(admission, "b")
    with pytest.raises(Overloaded, match="at its limit of 3 turns in flight"):
        admit(admission, "c")
    a1.release()
    a1.release()  # once only
    assert (admission.inflight, admission.inflight_of("a")) == (2, 1)
    admit(admission, "c")
    for ticket in (a2, b1):
        ticket.release()
    assert admission.inflight == 1 and admission.inflight_of("a") == 0


def test_zero_means_unbounded() -> None:
    admission = Admission(AdmissionLimits(max_inflight=0, max_inflight_per_tenant=0))
    tickets = [admit(admission, "a") for _ in range(1000)]
    assert admission.inflight == admission.running == len(tickets)


def test_token_bucket_rate_with_burst_and_exact_retry_after() -> None:
    now = [100.0]
    admission = Admission(
        AdmissionLimits(max_inflight=0, max_inflight_per_tenant=0, turns_per_s=2.0, burst=3), clock=lambda: now[0]
    )
    for _ in range(3):
        admit(admission, "a").release()
    with pytest.raises(Overloaded, match=r"over its rate of 2 turns/s \(burst 3\)") as err:
        admit(admission, "a")
    assert err.value.retry_after_s == pytest.approx(0.5) and err.value.retry_after == "1"
    admit(admission, "b").release()  # each tenant has its own bucket
    now[0] += 0.5
    admit(admission, "a").release()
    with pytest.raises(Overloaded):
        admit(admission, "a")
    now[0] += 10.0  # refills up to the burst, no further
    for _ in range(3):
        admit(admission, "a").release()
    with pytest.raises(Overloaded):
        admit(admission, "a")


def test_a_turn_refused_by_an_in_flight_bound_takes_no_rate_token() -> None:
    now = [0.0]
    admission = Admission(
        AdmissionLimits(max_inflight=0, max_inflight_per_tenant=1, turns_per_s=1.0, burst=2), clock=lambda: now[0]
    )
    held = admit(admission, "a")
    for _ in range(5):
        with pytest.raises(Overloaded, match="turns in flight"):
            admit(admission, "a")
    held.release()
    admit(admission, "a").release()  # the burst's second token is still there


async def settle() -> None:
    for _ in range(5):
        await asyncio.sleep(0)


class Turns:
    """Turns as tasks against one admission: `start` queues one, `finish` releases the oldest
    running turn; `started` lists the turns in the order they got a slot."""

    def __init__(self, admission: Admission) -> None:
        self.admission = admission
        self.started: list[str] = []
        self.running: list[tuple[str, object]] = []
        self.tasks: dict[str, asyncio.Task] = {}

    async def start(self, name: str) -> None:
        async def turn() -> None:
            ticket = await self.admission.admit(name[0])
            self.started.append(name)
            self.running.append((name, ticket))

        self.tasks[name] = asyncio.create_task(turn())
        await settle()

    async def finish(self) -> None:
        _, ticket = self.running.pop(0)
        ticket.release()  # type: ignore[attr-defined]
        await settle()


def test_turns_past_max_running_start_in_weighted_fair_order() -> None:
    async def go() -> list[str]:
        limits = AdmissionLimits(max_inflight=0, max_inflight_per_tenant=0, max_running=2)
        turns = Turns(Admission(limits, queue=WeightedFairQueue({"a": 2.0})))
        for name in ("a1", "a2", "a3", "a4", "a5", "a6", "b1", "b2"):
            await turns.start(name)
        assert turns.started == ["a1", "a2"] and len(turns.admission.queue) == 6
        while turns.running:
            await turns.finish()
        return turns.started

    # Waiting: a3..a6 start at 0, 0.5, 1, 1.5 (weight 2), b1 and b2 at 0 and 1.
    assert asyncio.run(go()) == ["a1", "a2", "a3", "b1", "a4", "a5", "b2", "a6"]


def test_a_full_scheduler_sheds_the_flooding_tenant_for_one_under_its_share() -> None:
    async def go() -> None:
        limits = AdmissionLimits(max_inflight=4, max_inflight_per_tenant=0, max_running=1)
        admission = Admission(limits, queue=WeightedFairQueue())
        turns = Turns(admission)
        for name in ("a1", "a2", "a3", "a4"):
            await turns.start(name)
        with pytest.raises(Overloaded, match="at its limit of 4 turns in flight"):
            await admission.admit("a")  # the flooding tenant's own arrival is the one refused
        await turns.start("b1")
        with pytest.raises(Overloaded, match="tenant 'a' holds the most waiting turns for its weight"):
            await turns.tasks["a4"]  # pushed out for b1
        assert (admission.inflight, admission.inflight_of("a"), admission.inflight_of("b")) == (4, 3, 1)
        while turns.running:
            await turns.finish()
        assert turns.started == ["a1", "a2", "b1", "a3"]
        assert admission.inflight == admission.running == 0

    asyncio.run(go())


def test_fifo_starts_turns_in_arrival_order_and_refuses_whoever_arrives_at_a_full_scheduler() -> None:
    async def go() -> None:
        limits = AdmissionLimits(max_inflight=4, max_inflight_per_tenant=0, max_running=1)
        admission = Admission(limits, queue=FifoQueue())
        turns = Turns(admission)
        for name in ("a1", "a2", "a3", "a4"):
            await turns.start(name)
        with pytest.raises(Overloaded, match="at its limit of 4 turns in flight"):
            await admission.admit("b")
        while turns.running:
            await turns.finish()
        assert turns.started == ["a1", "a2", "a3", "a4"]

    asyncio.run(go())


def test_a_caller_leaving_while_queued_gives_back_its_place_or_its_granted_slot() -> None:
    async def go() -> None:
        limits = AdmissionLimits(max_inflight=0, max_inflight_per_tenant=0, max_running=1)
        admission = Admission(limits, queue=WeightedFairQueue())
        turns = Turns(admission)
        for name in ("a1", "a2", "b1"):
            await turns.start(name)
        turns.tasks["a2"].cancel()
        await settle()
        assert (admission.inflight, len(admission.queue), admission.inflight_of("a")) == (2, 1, 1)
        # b1 cancelled in the same step as its slot was granted: the slot passes on to a3.
        await turns.start("a3")
        turns.running.pop(0)[1].release()  # type: ignore[attr-defined]
        turns.tasks["b1"].cancel()
        await settle()
        assert turns.started == ["a1", "a3"] and (admission.running, admission.inflight) == (1, 1)
        await turns.finish()
        assert admission.inflight == admission.running == 0 and not len(admission.queue)

    asyncio.run(go())


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        (dict(max_inflight=-1), "in-flight bounds"),
        (dict(max_running=-1), "in-flight bounds"),
        (dict(turns_per_s=-1.0), "turns_per_s"),
        (dict(burst=0), "burst must be at least 1"),
    ],
)
def test_limits_are_validated(fields, message) -> None:
    with pytest.raises(ValueError, match=message):
        AdmissionLimits(**fields)
