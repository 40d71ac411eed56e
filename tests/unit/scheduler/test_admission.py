"""Admission: the in-flight bounds and the per-tenant token bucket, with the exact Retry-After."""

from __future__ import annotations

import pytest

from agentserve.common.errors import Overloaded
from agentserve.scheduler.admission import Admission, AdmissionLimits

pytestmark = pytest.mark.unit


def test_in_flight_bounds_per_tenant_and_in_all() -> None:
    admission = Admission(AdmissionLimits(max_inflight=3, max_inflight_per_tenant=2))
    a1, a2 = admission.admit("a"), admission.admit("a")
    with pytest.raises(Overloaded, match="tenant 'a' is at its limit of 2 turns in flight") as err:
        admission.admit("a")
    assert err.value.retry_after == "1"
    b1 = admission.admit("b")
    with pytest.raises(Overloaded, match="at its limit of 3 turns in flight"):
        admission.admit("c")
    a1.release()
    a1.release()  # once only
    assert (admission.inflight, admission.inflight_of("a")) == (2, 1)
    admission.admit("c")
    for ticket in (a2, b1):
        ticket.release()
    assert admission.inflight == 1 and admission.inflight_of("a") == 0


def test_zero_means_unbounded() -> None:
    admission = Admission(AdmissionLimits(max_inflight=0, max_inflight_per_tenant=0))
    tickets = [admission.admit("a") for _ in range(1000)]
    assert admission.inflight == len(tickets)


def test_token_bucket_rate_with_burst_and_exact_retry_after() -> None:
    now = [100.0]
    admission = Admission(
        AdmissionLimits(max_inflight=0, max_inflight_per_tenant=0, turns_per_s=2.0, burst=3), clock=lambda: now[0]
    )
    for _ in range(3):
        admission.admit("a").release()
    with pytest.raises(Overloaded, match=r"over its rate of 2 turns/s \(burst 3\)") as err:
        admission.admit("a")
    assert err.value.retry_after_s == pytest.approx(0.5) and err.value.retry_after == "1"
    admission.admit("b").release()  # each tenant has its own bucket
    now[0] += 0.5
    admission.admit("a").release()
    with pytest.raises(Overloaded):
        admission.admit("a")
    now[0] += 10.0  # refills up to the burst, no further
    for _ in range(3):
        admission.admit("a").release()
    with pytest.raises(Overloaded):
        admission.admit("a")


def test_a_turn_refused_by_an_in_flight_bound_takes_no_rate_token() -> None:
    now = [0.0]
    admission = Admission(
        AdmissionLimits(max_inflight=0, max_inflight_per_tenant=1, turns_per_s=1.0, burst=2), clock=lambda: now[0]
    )
    held = admission.admit("a")
    for _ in range(5):
        with pytest.raises(Overloaded, match="turns in flight"):
            admission.admit("a")
    held.release()
    admission.admit("a").release()  # the burst's second token is still there


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        (dict(max_inflight=-1), "in-flight bounds"),
        (dict(turns_per_s=-1.0), "turns_per_s"),
        (dict(burst=0), "burst must be at least 1"),
    ],
)
def test_limits_are_validated(fields, message) -> None:
    with pytest.raises(ValueError, match=message):
        AdmissionLimits(**fields)
