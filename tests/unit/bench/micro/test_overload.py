"""bench overload's accounting of one phase: exact counts, Retry-After presence and quantiles."""

from __future__ import annotations

import pytest

from agentserve.bench.micro.overload import Outcome, Phase

pytestmark = pytest.mark.unit


def test_a_phase_counts_outcomes_exactly() -> None:
    outcomes = [Outcome(200, 0.01 * i, None) for i in range(1, 101)]
    outcomes += [Outcome(429, 0.001, "1"), Outcome(429, 0.001, None), Outcome(503, 0.2, None)]
    phase = Phase.of(outcomes, wall_s=2.0)
    assert (phase.requests, phase.ok, phase.refused, phase.refused_with_retry_after) == (103, 100, 2, 1)
    assert phase.other == {"503": 1}
    # latencies 0.01..1.00 s: p50 at rank 49.5 (0.50 and 0.51), p99 at rank 98.01 (0.99 and 1.00)
    assert (phase.ok_p50_s, phase.ok_p99_s) == (pytest.approx(0.505), pytest.approx(0.9901))
    assert Phase.of([], 1.0).ok_p99_s == 0.0
