"""The kvstore benches' per-operation summary: rate and latency percentiles by bench.common.stats."""

import pytest

from agentserve.bench.micro.kvstore.disk import summary

pytestmark = pytest.mark.unit


def test_summary_takes_latency_percentiles_by_linear_interpolation() -> None:
    # 4 ops: p50 at rank 1.5 (2 and 3 ms), p99 at rank 2.97 (3 and 4 ms)
    assert summary(2_000_000, 0.5, [0.004, 0.001, 0.003, 0.002]) == {
        "MBps": 4.0,
        "p50_ms": 2.5,
        "p99_ms": 3.97,
        "ops": 4,
    }


def test_summary_of_no_operations_reports_zero_latency() -> None:
    assert summary(0, 1.0, []) == {"MBps": 0.0, "p50_ms": 0.0, "p99_ms": 0.0, "ops": 0}
