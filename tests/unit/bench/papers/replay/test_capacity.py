"""Capacity search against fake systems whose SLO breaks at a known load."""

import asyncio
import random

import pytest

from agentserve.bench.papers.replay.capacity import SearchSpec, per_engine, search, with_load
from agentserve.bench.papers.replay.replayer import ReplayOptions

pytestmark = pytest.mark.unit


def _run(threshold: float, spec: SearchSpec, noise: float = 0.0, seed: int = 0):
    rng = random.Random(seed)

    async def probe(load: float) -> bool:
        # A system that meets the SLO below `threshold`; noise blurs the edge by +-noise.
        return load <= threshold * (1 + rng.uniform(-noise, noise))

    return asyncio.run(search(probe, spec))


@pytest.mark.parametrize("threshold", [0.3, 1.0, 3.7, 11.2, 40.0])
def test_search_brackets_the_threshold_within_tolerance(threshold):
    result = _run(threshold, SearchSpec(start=1.0, rel_tolerance=0.05, max_probes=20))
    assert result.converged
    assert result.capacity <= threshold < result.lowest_failing
    assert result.lowest_failing <= result.capacity * 1.05


def test_integer_loads_stop_at_adjacent_values():
    result = _run(13.0, SearchSpec(start=2, integer=True, max_probes=20))
    assert (result.capacity, result.lowest_failing, result.converged) == (13.0, 14.0, True)
    assert [x for x, _ in result.probes][:4] == [2.0, 4.0, 8.0, 16.0]
    assert all(x == int(x) for x, _ in result.probes)


def test_everything_passing_stops_at_max_load_and_everything_failing_at_the_floor():
    up = _run(100.0, SearchSpec(start=1.0, max_load=10.0))
    assert (up.capacity, up.lowest_failing, up.converged) == (10.0, None, True)
    down = _run(0.0, SearchSpec(start=4, integer=True))
    assert (down.capacity, down.lowest_failing, down.converged) == (None, 1.0, True)


def test_two_noisy_searches_agree_within_ten_percent():
    spec = SearchSpec(start=1.0, rel_tolerance=0.05, max_probes=14)
    for seed in range(20):
        a = _run(6.0, spec, noise=0.03, seed=seed).capacity
        b = _run(6.0, spec, noise=0.03, seed=seed + 100).capacity
        assert abs(a - b) <= 0.1 * max(a, b)


def test_probe_budget_is_respected():
    result = _run(5.0, SearchSpec(start=1.0, rel_tolerance=1e-6, max_probes=6))
    assert len(result.probes) == 6 and not result.converged


def test_load_kinds_and_per_engine_capacity():
    base = ReplayOptions(speedup=2.0)
    assert with_load(base, "rate", 0.5).rate == 0.5
    assert with_load(base, "concurrency", 3.0).concurrency == 3
    assert with_load(base, "speedup", 8.0).speedup == 8.0
    probes = [
        {"engines": {"prefill": {"p": 3}, "decode": {"d0": 2, "d1": 1}}},
        {"engines": {"prefill": {"p": 1}, "decode": {"d2": 1}}},
    ]
    assert per_engine(6.0, probes) == {
        "prefill": {"engines": ["p"], "capacity_per_engine": 6.0},
        "decode": {"engines": ["d0", "d1", "d2"], "capacity_per_engine": 2.0},
    }
    with pytest.raises(ValueError):
        SearchSpec(start=0)
