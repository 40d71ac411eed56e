"""The statistics every benchmark reports, defined once so "p90" means one thing in every report.

A percentile is linear interpolation between the closest ranks, numpy's default (`method="linear"`):
over the `n` values sorted ascending, the `p`-th percentile sits at rank `(n - 1) * p / 100`; a
fractional rank takes the two values around it, weighted by the fraction. So the 0th is the
smallest value, the 100th the largest, and the 50th the median of an even count is the mean of
the middle two. Infinite values (a failed turn's latency) sort last and are never interpolated
with: a percentile that reaches one is infinite.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence

PERCENTILES = (50, 90, 99)


def percentile(values: Sequence[float], p: float) -> float | None:
    """The `p`-th percentile (0..100) of `values` by linear interpolation; None for no values."""
    if not 0 <= p <= 100:
        raise ValueError(f"percentile must be in [0, 100], got {p}")
    data = sorted(values)
    if not data:
        return None
    rank = (len(data) - 1) * p / 100
    lo = math.floor(rank)
    hi = min(lo + 1, len(data) - 1)
    if rank == lo or math.isinf(data[hi]):  # an exact rank, or a step toward an infinite value (a failure)
        return data[lo] if rank == lo else data[hi]
    return data[lo] + (data[hi] - data[lo]) * (rank - lo)


def distribution(values: Iterable[float | None], scale: float = 1.0) -> dict[str, float | int | None]:
    """count, mean, p50/p90/p99 and max of the non-None `values`, each multiplied by `scale`."""
    data = [v * scale for v in values if v is not None]
    out: dict[str, float | int | None] = {"count": len(data), "mean": sum(data) / len(data) if data else None}
    for p in PERCENTILES:
        out[f"p{p}"] = percentile(data, p)
    out["max"] = max(data) if data else None
    return out


def ecdf(values: Iterable[float | None]) -> tuple[list[float], list[float]]:
    """Sorted values and the fraction of values at or below each (for CDF plots)."""
    data = sorted(v for v in values if v is not None)
    n = len(data)
    return data, [(i + 1) / n for i in range(n)]
