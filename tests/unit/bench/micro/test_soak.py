"""`bench soak`'s arithmetic without a cluster: the config refuses what would make no soak, growth
compares the last fifth of the samples with the first, and service processes are found by their
command line."""

from __future__ import annotations

import pytest

from agentserve.bench.micro.soak import SERVICE_CMDLINE, MemoryTrace, SoakConfig, report

pytestmark = pytest.mark.unit


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        (dict(duration_s=0), "duration_s must be positive"),
        (dict(fraction=1.5), r"fraction must be in \(0, 1\]"),
        (dict(rate=-1), "rate must be >= 0"),
        (dict(turns_per_session=0), "turns_per_session must be at least 1"),
        (dict(max_growth=0), "max_growth must be positive"),
    ],
)
def test_config_names_the_bad_setting(fields, message) -> None:
    with pytest.raises(ValueError, match=message):
        SoakConfig(**fields)


def test_growth_is_the_last_fifth_over_the_first() -> None:
    trace = MemoryTrace({"scheduler-1": 1, "kvstore-2": 2})
    trace.samples = {"scheduler-1": [100.0] * 5 + [105.0] * 5, "kvstore-2": [200.0, 200.0, 230.0, 260.0, 300.0]}
    assert trace.growth() == {
        "scheduler-1": {"first_mb": 100.0, "last_mb": 105.0, "peak_mb": 105.0, "growth": 0.05},
        "kvstore-2": {"first_mb": 200.0, "last_mb": 300.0, "peak_mb": 300.0, "growth": 0.5},
    }


def test_service_processes_are_found_by_their_module() -> None:
    found = [
        m.group(1)
        for cmdline in (
            b"/venv/bin/python\x00-m\x00agentserve.decode\x00--grpc-port\x0050054\x00",
            b"/venv/bin/python\x00-m\x00agentserve.scheduler\x00",
            b"/venv/bin/python\x00-m\x00agentserve.cli.main\x00bench\x00soak\x00",
            b"/venv/bin/python\x00-m\x00pytest\x00agentserve.decode\x00",
        )
        if (m := SERVICE_CMDLINE.search(cmdline))
    ]
    assert found == [b"decode", b"scheduler"]


def test_the_report_says_passed_or_failed_and_why() -> None:
    result = {
        "capacity_turns_per_s": 4.0,
        "offered_turns_per_s": 2.8,
        "wall_s": 60.0,
        "turns_ok": 168,
        "turns_failed": {},
        "turn_p50_s": 0.4,
        "turn_p99_s": 0.9,
        "memory": {"kvstore-2": {"first_mb": 200.0, "last_mb": 210.0, "peak_mb": 212.0, "growth": 0.05}},
        "worst_growth": 0.05,
        "passed": True,
        "regime": {"max_growth": 0.1},
    }
    assert report(result).splitlines() == [
        "capacity 4.0 turns/s; soak offered 2.8 turns/s for 60.0 s: 168 ok, failed none; turn p50 0.4 s, p99 0.9 s",
        "  kvstore-2: 200.0 -> 210.0 MB (peak 212.0), growth +5.0%",
        "soak PASSED (worst growth +5.0%, limit 10%; failed turns must be 0)",
    ]
