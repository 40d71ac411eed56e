"""The one percentile definition (linear interpolation between closest ranks) and what is built on it."""

import math

import numpy as np
import pytest

from agentserve.bench.common.stats import distribution, ecdf, percentile

pytestmark = pytest.mark.unit


def test_percentile_interpolates_between_the_closest_ranks() -> None:
    values = [40.0, 10.0, 30.0, 20.0]  # sorted: 10 20 30 40, ranks 0..3
    assert percentile(values, 0) == 10.0
    assert percentile(values, 100) == 40.0
    assert percentile(values, 50) == 25.0  # rank 1.5: halfway between 20 and 30
    assert percentile(values, 90) == 37.0  # rank 2.7: 30 + 0.7 * 10
    assert percentile(values, 10) == 13.0  # rank 0.3: 10 + 0.3 * 10
    assert percentile([7.0], 99) == 7.0


def test_percentile_of_nothing_is_none_and_p_outside_0_100_is_refused() -> None:
    assert percentile([], 50) is None
    with pytest.raises(ValueError, match=r"percentile must be in \[0, 100\], got 101"):
        percentile([1.0], 101)
    with pytest.raises(ValueError, match=r"got -1"):
        percentile([1.0], -1)


@pytest.mark.parametrize(
    "values", [[5.0], [1.0, 2.0], [3.0, 1.0, 2.0, 10.0], list(np.random.default_rng(1).random(101))]
)
@pytest.mark.parametrize("p", [0, 10, 50, 90, 99, 100])
def test_percentile_is_numpys_default_method(values: list[float], p: float) -> None:
    assert percentile(values, p) == pytest.approx(float(np.percentile(values, p, method="linear")), rel=1e-12)


def test_distribution_skips_missing_values_and_scales() -> None:
    assert distribution([0.1, None, 0.3], scale=1000) == {
        "count": 2,
        "mean": 200.0,
        "p50": 200.0,
        "p90": pytest.approx(280.0, rel=1e-12),
        "p99": pytest.approx(298.0, rel=1e-12),
        "max": 300.0,
    }
    assert distribution([None]) == {"count": 0, "mean": None, "p50": None, "p90": None, "p99": None, "max": None}


def test_ecdf_is_the_share_at_or_below_each_sorted_value() -> None:
    assert ecdf([3, None, 1, 2]) == ([1, 2, 3], [1 / 3, 2 / 3, 1.0])


def test_a_percentile_reaching_an_infinite_value_is_infinite_and_one_below_it_is_not() -> None:
    values = [10.0, 20.0, 30.0, 40.0, math.inf]  # a failed turn's latency is infinite
    assert percentile(values, 100) == math.inf
    assert percentile(values, 90) == math.inf  # rank 3.6: a step toward the failure
    assert percentile(values, 75) == 40.0  # rank 3 exactly: no step
    assert percentile(values, 50) == 30.0
    assert percentile([math.inf, math.inf], 50) == math.inf
