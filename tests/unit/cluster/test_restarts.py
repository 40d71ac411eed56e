"""RestartPolicy: exact restart times with backoff, reset after a stable run, and giving up."""

from __future__ import annotations

import pytest

from agentserve.cluster.restarts import RestartPolicy, RestartState

pytestmark = pytest.mark.unit


def test_backoff_doubles_to_the_cap_and_gives_up_after_max_restarts() -> None:
    state = RestartState(RestartPolicy(initial_s=1.0, max_s=5.0, stable_s=60.0, max_restarts=5))
    state.started(0.0)
    due = []
    now = 10.0
    for _ in range(5):
        at = state.died(now)
        assert at is not None
        due.append(at - now)
        state.started(at)
        now = at + 1.0  # dies a second after each restart
    assert due == [1.0, 2.0, 4.0, 5.0, 5.0]
    assert state.died(now) is None


def test_a_stable_run_starts_the_backoff_over() -> None:
    state = RestartState(RestartPolicy(initial_s=1.0, max_s=30.0, stable_s=60.0, max_restarts=2))
    state.started(0.0)
    assert state.died(100.0) == 101.0
    state.started(101.0)
    assert state.died(102.0) == 104.0
    state.started(104.0)
    assert state.died(104.5) is None  # two in a row without a stable run
    state.started(200.0)
    assert state.died(300.0) == 301.0  # stayed up 100 s: healthy again


@pytest.mark.parametrize("fields", [dict(initial_s=0.0), dict(initial_s=5.0, max_s=1.0), dict(max_restarts=0)])
def test_policy_is_validated(fields) -> None:
    with pytest.raises(ValueError):
        RestartPolicy(**fields)
