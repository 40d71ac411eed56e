"""The must-show figures of `bench dualpath`, computed from every policy's run, with the issue's
targets beside them.

Offline, every policy serves the same agents submitted at once; a policy's throughput is that
work over its JCT, so a throughput ratio is the inverse JCT ratio and a JCT reduction is
1 - JCT(policy) / JCT(reference). Online, capacity is the highest agent arrival rate (agents/s)
whose turns meet the SLO.

TPOT is compared at the same offered load, as the paper's online figures do (TTFT and TPOT per
agent arrival rate, DualPath's TPOT level with the baseline's): `tpot_p90_ratio` is dualpath's TPOT
p90 over the baseline's at the highest online probe load at which both met the SLO. Offline, every
policy serves the same agents as fast as it can, so dualpath's decode engines run about twice the
baseline's turns per second and batch more per step: `tpot_p90_ratio_offline` (printed, no
target) is that ratio, which measures load as much as path B.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class Target:
    key: str
    op: str  # ">=" or "<="
    bound: float | str  # a number, or another key's value
    paper: str

    def bound_value(self, figures: Mapping[str, float | None]) -> float | None:
        return figures.get(self.bound) if isinstance(self.bound, str) else self.bound

    def met(self, figures: Mapping[str, float | None]) -> bool | None:
        value, bound = figures.get(self.key), self.bound_value(figures)
        if value is None or bound is None:
            return None
        return value >= bound if self.op == ">=" else value <= bound


TARGETS = (
    Target("offline_throughput_ratio", ">=", 1.87, "up to 1.87x"),
    Target("split_throughput_ratio", ">=", "offline_throughput_ratio", "the paper's future work"),
    Target("layerwise_jct_reduction", ">=", 0.15, "17.2%"),
    Target("dualpath_jct_reduction_over_layerwise", ">=", 0.20, "25.2%"),
    Target("online_capacity_ratio", ">=", 1.9, "1.96x on average"),
    Target("snic_max_over_avg", "<=", 1.1, "1.06"),
    Target("tpot_p90_ratio", "<=", 1.05, "TBT unaffected (online, at the same APS)"),
)


def _ratio(num: float | None, den: float | None) -> float | None:
    return num / den if num is not None and den else None


def _jct(offline: Mapping[str, Mapping[str, Any] | None], policy: str) -> float | None:
    run = offline.get(policy)
    if not run or run["turns_failed"] or not run["turns_ok"]:
        return None  # a run that lost turns did less work: its JCT compares with nothing
    return run["jct_s"]


def equal_load_tpot(probes: Mapping[str, list[Mapping[str, Any]]], policy: str = "dualpath") -> dict[str, Any] | None:
    """TPOT p90 of `policy` over the baseline's at each online load both probed and both met the
    SLO at (`probes`: each policy's capacity probes); the figure is the highest such load's. None
    when they share no such load."""
    met = {
        name: {p["load"]: p for p in probes.get(name) or [] if p.get("meets_slo") and p.get("tpot_p90_ms")}
        for name in ("baseline", policy)
    }
    loads = sorted(set(met["baseline"]) & set(met[policy]))
    if not loads:
        return None
    per_load = [
        {
            "agents_per_s": load,
            "baseline_tpot_p90_ms": met["baseline"][load]["tpot_p90_ms"],
            f"{policy}_tpot_p90_ms": met[policy][load]["tpot_p90_ms"],
            "ratio": met[policy][load]["tpot_p90_ms"] / met["baseline"][load]["tpot_p90_ms"],
        }
        for load in loads
    ]
    return {"agents_per_s": loads[-1], "ratio": per_load[-1]["ratio"], "per_load": per_load}


def must_show(
    offline: Mapping[str, Mapping[str, Any] | None],
    capacity: Mapping[str, float | None],
    probes: Mapping[str, list[Mapping[str, Any]]] | None = None,
) -> dict[str, float | None]:
    """The issue's keys from per-policy offline figures (`metrics.run_figures`), capacities and
    their online probes (for TPOT at equal load), and `tpot_p90_ratio_offline` beside them."""
    base, lw, dp, split = (_jct(offline, p) for p in ("baseline", "layerwise", "dualpath", "dualpath-split"))
    dp_run = offline.get("dualpath") or {}
    base_run = offline.get("baseline") or {}
    return {
        "offline_throughput_ratio": _ratio(base, dp),
        "split_throughput_ratio": _ratio(base, split),
        "layerwise_jct_reduction": 1 - lw / base if lw is not None and base else None,
        "dualpath_jct_reduction_over_layerwise": 1 - dp / lw if dp is not None and lw else None,
        "online_capacity_ratio": _ratio(capacity.get("dualpath"), capacity.get("baseline")),
        "snic_max_over_avg": (dp_run.get("snic") or {}).get("max_over_avg"),
        "tpot_p90_ratio": (equal_load_tpot(probes or {}) or {}).get("ratio"),
        "tpot_p90_ratio_offline": _ratio(dp_run.get("tpot_p90_ms"), base_run.get("tpot_p90_ms")),
    }


def verdicts(figures: Mapping[str, float | None]) -> dict[str, dict[str, Any]]:
    """Each key's target, the paper's figure and whether this run meets it (None: not measured)."""
    return {
        t.key: {
            "value": figures.get(t.key),
            "target": f"{t.op} {t.bound}",
            "target_value": t.bound_value(figures),
            "paper": t.paper,
            "met": t.met(figures),
        }
        for t in TARGETS
    }
