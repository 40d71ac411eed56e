"""Capacity search: the highest load at which a run still meets its SLO.

`search` assumes "meets the SLO" is monotone in load (true up to noise): it ramps geometrically
from `start` until a probe fails (or down until one passes), then bisects the bracket until it is
within `rel_tolerance` (integers: adjacent). Each probe is a full replay at that load, measured on
a tenant of its own so no probe hits another's cache.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from agentserve.bench.papers.replay.replayer import ReplayOptions

LOADS = ("rate", "concurrency", "speedup")


@dataclass(frozen=True)
class SearchSpec:
    start: float
    factor: float = 2.0
    max_load: float | None = None
    min_load: float | None = None
    rel_tolerance: float = 0.05
    max_probes: int = 12
    integer: bool = False

    def __post_init__(self) -> None:
        if self.start <= 0 or self.factor <= 1 or self.rel_tolerance <= 0 or self.max_probes < 2:
            raise ValueError("capacity search needs start > 0, factor > 1, tolerance > 0 and at least 2 probes")
        if self.max_load is not None and self.max_load < self.start:
            raise ValueError(f"max load {self.max_load} is below the start {self.start}")


@dataclass
class SearchResult:
    capacity: float | None  # highest load that passed; None if even the lowest probe failed
    lowest_failing: float | None  # None if even the highest probe passed
    probes: list[tuple[float, bool]] = field(default_factory=list)
    converged: bool = False


async def search(probe: Callable[[float], Awaitable[bool]], spec: SearchSpec) -> SearchResult:
    result = SearchResult(None, None)
    floor = spec.min_load if spec.min_load is not None else (1.0 if spec.integer else spec.start / 64)

    def norm(x: float) -> float:
        x = max(x, floor)
        if spec.max_load is not None:
            x = min(x, spec.max_load)
        return float(max(1, round(x))) if spec.integer else x

    async def run(x: float) -> bool:
        ok = await probe(x)
        result.probes.append((x, ok))
        if ok:
            result.capacity = x if result.capacity is None else max(result.capacity, x)
        else:
            result.lowest_failing = x if result.lowest_failing is None else min(result.lowest_failing, x)
        return ok

    if await _bracket(norm(spec.start), run, norm, result, spec):
        result.converged = True
        return result
    while result.capacity is not None and result.lowest_failing is not None and len(result.probes) < spec.max_probes:
        lo, hi = result.capacity, result.lowest_failing
        if _close(lo, hi, spec):
            break
        mid = norm((lo + hi) / 2)
        if mid in (lo, hi):
            break
        await run(mid)
    cap, failing = result.capacity, result.lowest_failing
    result.converged = cap is not None and failing is not None and (_close(cap, failing, spec) or failing <= cap)
    return result


async def _bracket(
    x: float,
    run: Callable[[float], Awaitable[bool]],
    norm: Callable[[float], float],
    result: SearchResult,
    spec: SearchSpec,
) -> bool:
    """Probe from `x` up by `spec.factor` while it passes (down while it fails) until one load
    passed and one failed; True if instead the ceiling passed or the floor failed."""
    up = await run(x)
    while (result.lowest_failing if up else result.capacity) is None and len(result.probes) < spec.max_probes:
        nxt = norm(x * spec.factor if up else x / spec.factor)
        if (nxt <= x) if up else (nxt >= x):  # at the ceiling and it passes, or the floor and it fails
            return True
        x = nxt
        await run(x)
    return False


def _close(lo: float, hi: float, spec: SearchSpec) -> bool:
    if spec.integer:
        return hi - lo <= 1
    return hi <= lo * (1 + spec.rel_tolerance)


def probe_entry(load: float, summary: dict) -> dict:
    """What a capacity report keeps of one probe's replay summary."""
    gp = summary["goodput"]
    return {
        "load": load,
        "meets_slo": gp["meets_slo"],
        "attainment": gp["attainment"],
        "goodput_turns_per_s": gp["turns_per_s"],
        "turns_per_s": summary["throughput"]["turns_per_s"],
        "turns_total": summary["turns_total"],
        "turns_failed": summary["turns_failed"],
        "duration_s": summary["duration_s"],
        "ttft_p90_ms": summary["ttft_p90_ms"],
        "tpot_p90_ms": summary["tpot_p90_ms"],
        "e2e_p90_ms": summary["e2e_p90_ms"],
        "ttft_p90_first_turn_ms": summary["ttft_p90_first_turn_ms"],
        "ttft_p90_later_turns_ms": summary["ttft_p90_later_turns_ms"],
        "hit_ratio": summary["hit_ratio"],
        "engines": summary["engines"],
        "slo_check": summary.get("slo_check"),
    }


def binding_term(probes: list[dict], capacity: float | None, lowest_failing: float | None) -> dict | None:
    """Which SLO term binds the capacity (`SLO.check`): the one furthest past its bound at the lowest
    failing load, else (every probe passed) the one nearest its bound at the capacity. None when
    the probes carry no per-term check."""
    at = lowest_failing if lowest_failing is not None else capacity
    probe = next((p for p in probes if p["load"] == at and p.get("slo_check")), None)
    if probe is None:
        return None
    check = probe["slo_check"]
    term = next(t for t in check["terms"] if t["term"] == check["binding"])
    return {
        "term": term["term"],
        "load": at,
        "why": "fails first: furthest past its bound at the lowest failing load"
        if lowest_failing is not None
        else "nearest its bound at the highest load probed",
        "value_ms": term["value_ms"],
        "bound_ms": term["bound_ms"],
        "failed_turns": term["failed_turns"],
        "terms_failed": [t["term"] for t in check["terms"] if not t["met"]],
    }


def with_load(options: ReplayOptions, load_name: str, load: float) -> ReplayOptions:
    """`options` (ReplayOptions) at `load` of kind `load_name`."""
    if load_name == "rate":
        return replace(options, rate=load, concurrency=None)
    if load_name == "concurrency":
        return replace(options, concurrency=int(load), rate=None)
    return replace(options, speedup=load)


def per_engine(capacity: float | None, probes: list[dict]) -> dict:
    """Capacity divided by the engines of each role that served turns."""
    engines: dict[str, set[str]] = {"prefill": set(), "decode": set()}
    for p in probes:
        for role in engines:
            engines[role].update(p["engines"].get(role, {}))
    return {
        role: {"engines": sorted(ids), "capacity_per_engine": capacity / len(ids) if capacity and ids else None}
        for role, ids in engines.items()
    }
