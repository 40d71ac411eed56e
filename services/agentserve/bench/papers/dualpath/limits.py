"""What limits a must-show figure that misses its target, measured in the same run: the storage
NICs of each side (busy share, Gbps moved, the Gbps their shaping allowed while busy), the CPU
floor against the runs' JCT, and any policy this build cannot run."""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from agentserve.bench.papers.dualpath.phases import busiest_engine_share
from agentserve.bench.papers.dualpath.ratios import equal_load_tpot
from agentserve.bench.papers.dualpath.regime import path_a
from agentserve.bench.papers.dualpath.runs import PolicyResult

if TYPE_CHECKING:  # bench imports this module
    from agentserve.bench.papers.dualpath.bench import BenchSpec

Results = Mapping[str, PolicyResult]  # policy name -> its runs


def _side(run: dict | None, role: str) -> dict[str, Any] | None:
    if not run:
        return None
    snic = run["snic"]
    engines = {e: u for e, u in snic["utilization"].items() if e.split("-")[0] == role}
    totals = snic["bytes_by_role"].get(role, {})
    shares = [u for u in engines.values() if u is not None]
    return {
        "engines": len(engines),
        "busy_share_max": max(shares) if shares else None,
        "busy_share_avg": sum(shares) / len(shares) if shares else None,
        "gbps_moved": totals.get("gbps"),
        "gbps_ceiling_measured": totals.get("gbps_when_busy"),
    }


def storage_sides(results: Results) -> dict[str, dict[str, Any]]:
    """Per policy, both sides' storage NICs: what a second path could add is the decode side's
    ceiling over the prefill side's."""
    out = {}
    for name, r in results.items():
        if r.offline:
            out[name] = {role: _side(r.offline, role) for role in ("prefill", "decode")}
    return out


def _fmt(x: float | None, digits: int = 2) -> str:
    return "n/a" if x is None else f"{x:.{digits}f}"


def _unavailable(results: Results, names: tuple[str, ...]) -> list[str]:
    return [f"{n}: {'; '.join(results[n].unavailable)}" for n in names if n in results and results[n].unavailable]


NEEDS = {
    "offline_throughput_ratio": ("baseline", "dualpath"),
    "split_throughput_ratio": ("baseline", "dualpath-split"),
    "layerwise_jct_reduction": ("baseline", "layerwise"),
    "dualpath_jct_reduction_over_layerwise": ("layerwise", "dualpath"),
    "online_capacity_ratio": ("baseline", "dualpath"),
    "snic_max_over_avg": ("dualpath",),
    "tpot_p90_ratio": ("baseline", "dualpath"),
}


PATH_GAINS = ("offline_throughput_ratio", "split_throughput_ratio", "online_capacity_ratio")
OFFLINE_GAINS = (*PATH_GAINS, "layerwise_jct_reduction", "dualpath_jct_reduction_over_layerwise")


def _turn_phases(results: Results, name: str) -> dict[str, Any] | None:
    """`name`'s offline `phases.breakdown`, if it ran and recorded one."""
    r = results.get(name)
    return (r.offline or {}).get("turn_phases") if r is not None else None


def _physical_limits(results: Results, names: tuple[str, ...]) -> list[str]:
    """Each policy's JCT beside the bounds its run measured (`phases.breakdown`): its busiest
    prefill engine's compute and its busiest prefill storage NIC's busy time, each the JCT that
    limit alone allows, and where its prefill engines' time went."""
    out = []
    for name in names:
        phases = _turn_phases(results, name)
        if not phases:
            continue
        b = phases["bounds"]
        share = {k: busiest_engine_share(phases, k) for k in ("compute_share", "layer_wait_share")}
        out.append(
            f"{name}: JCT {_fmt(b['jct_s'], 1)} s; bounds: prefill compute {_fmt(b['prefill_compute_s'], 1)} s, "
            f"prefill storage NIC {_fmt(b['prefill_snic_s'], 1)} s, one agent's chain {_fmt(b['agent_chain_s'], 1)} s; "
            f"prefill engines computing up to {_fmt(share['compute_share'])} of the run, held by layer waits up to "
            f"{_fmt(share['layer_wait_share'])}"
        )
    return out


def _bound(results: Results, name: str) -> float | None:
    """The largest of `name`'s measured bounds: the JCT its prefill side allows at best."""
    phases = _turn_phases(results, name)
    if not phases:
        return None
    values = [phases["bounds"][k] for k in ("prefill_compute_s", "prefill_snic_s")]
    return max((v for v in values if v is not None), default=None)


def _best_reduction(results: Results) -> list[str]:
    layerwise, dualpath = _bound(results, "layerwise"), _bound(results, "dualpath")
    if not layerwise or dualpath is None:
        return []
    return [
        f"were each at its largest bound (layerwise {layerwise:.1f} s, dualpath {dualpath:.1f} s), the reduction "
        f"would be {1 - dualpath / layerwise:.3f}: layerwise overlaps its reads with compute, so dualpath can only "
        f"gain where a turn reads longer than it computes"
    ]


def explain(
    verdicts: Mapping[str, Mapping[str, Any]], results: Results, floor: Mapping[str, Any] | None, spec: BenchSpec
) -> list[dict[str, Any]]:
    sides = storage_sides(results)
    bound = path_a(sides)
    out = []
    for key, v in verdicts.items():
        if v["met"]:
            continue
        reasons = _missing(key, v, results, spec)
        if v["value"] is not None:
            reasons += _measured(key, results, sides, bound, floor)
        out.append({"key": key, "value": v["value"], "target": v["target"], "limited_by": reasons})
    return out


def _missing(key: str, v: Mapping[str, Any], results: Results, spec: BenchSpec) -> list[str]:
    """Why figure `key` lacks what it needs: runs that did not run or lost turns, no online search."""
    reasons = _unavailable(results, NEEDS[key])
    for name in NEEDS[key]:
        r = results.get(name)
        if r is not None and r.offline and r.offline["turns_failed"]:
            reasons.append(f"{name} lost {r.offline['turns_failed']} turns ({r.offline['failures']})")
    if key == "online_capacity_ratio" and spec.online is None:
        reasons.append("no online capacity search in this invocation")
    if key == "tpot_p90_ratio" and v["value"] is None:
        reasons.append(
            "no online capacity search in this invocation"
            if spec.online is None
            else "no online probe load at which both the baseline and dualpath met the SLO"
        )
    return reasons


def _measured(
    key: str,
    results: Results,
    sides: Mapping[str, Mapping[str, Any]],
    bound: Mapping[str, Any] | None,
    floor: Mapping[str, Any] | None,
) -> list[str]:
    """What the runs measured that bounds figure `key`: path A's load, the storage ceilings, the CPU
    floor, the physical limits, the NICs' busy shares."""
    reasons = []
    if key in OFFLINE_GAINS and bound is not None and not bound["storage_bound"]:
        reasons.append(
            f"the {bound['policy']} run's prefill storage NICs (path A) were busy at most "
            f"{_fmt(bound['prefill_snic_busy_max'])} of its run: path A was not the bottleneck, so "
            f"overlapping or adding reads has little to gain"
        )
    if key in PATH_GAINS:
        dp = sides.get("dualpath") or {}
        pre, dec = dp.get("prefill") or {}, dp.get("decode") or {}
        reasons.append(
            "storage read ceilings measured (Gbps while busy, summed per side): prefill "
            f"{_fmt(pre.get('gbps_ceiling_measured'))}, decode {_fmt(dec.get('gbps_ceiling_measured'))}; "
            f"moved under dualpath: prefill {_fmt(pre.get('gbps_moved'))}, decode {_fmt(dec.get('gbps_moved'))}"
        )
    reasons += _cpu_floor(results, floor)
    if key in OFFLINE_GAINS:
        reasons += _physical_limits(results, NEEDS[key])
    if key == "dualpath_jct_reduction_over_layerwise":
        reasons += _best_reduction(results)
    dualpath = results.get("dualpath")
    if key == "snic_max_over_avg" and dualpath is not None and dualpath.offline:
        util = dualpath.offline["snic"]["utilization"]
        reasons.append("dualpath storage NIC busy shares: " + ", ".join(f"{e} {_fmt(u)}" for e, u in util.items()))
    if key == "tpot_p90_ratio":
        reasons += _tpot(results)
    return reasons


def _cpu_floor(results: Results, floor: Mapping[str, Any] | None) -> list[str]:
    """The CPU floor's share of dualpath's JCT, when the emulation's own processes bound the run."""
    dualpath = results.get("dualpath")
    if not (floor and floor.get("jct_s") and dualpath and dualpath.offline):
        return []
    share = floor["jct_s"] / dualpath.offline["jct_s"]
    if share <= 0.5:
        return []
    return [
        f"the CPU floor (free compute, unshaped fabric) takes {share:.0%} of dualpath's JCT: the "
        f"emulation's own processes, not the modelled I/O, bound the run"
    ]


def _tpot(results: Results) -> list[str]:
    """TPOT at each online load both policies met the SLO at; then offline, beside each policy's turn
    rate, and layerwise's: it relays nothing (path A only), so a rise it shares with dualpath is not
    path B's traffic on the decode engines."""
    probes = {n: (r.capacity or {}).get("probes") or [] for n, r in results.items()}
    equal = equal_load_tpot(probes)
    out = []
    if equal:
        out.append(
            "TPOT p90 at the same online load, dualpath over the baseline: "
            + ", ".join(
                f"{_fmt(p['agents_per_s'])} agents/s {_fmt(p['dualpath_tpot_p90_ms'], 1)} / "
                f"{_fmt(p['baseline_tpot_p90_ms'], 1)} ms = {_fmt(p['ratio'], 3)}"
                for p in equal["per_load"]
            )
        )
    runs: dict[str, dict[str, Any]] = {
        n: offline for n in ("baseline", "layerwise", "dualpath") if n in results and (offline := results[n].offline)
    }
    out.append(
        "offline TPOT p90 "
        + ", ".join(f"{n} {_fmt(r['tpot_p90_ms'], 1)} ms at {_fmt(r['turns_per_s'])} turns/s" for n, r in runs.items())
    )
    lw, dp, base = runs.get("layerwise"), runs.get("dualpath"), runs.get("baseline")
    if lw and dp and base and lw["tpot_p90_ms"] and base["tpot_p90_ms"]:
        out.append(
            f"layerwise, which relays nothing, over the baseline {_fmt(lw['tpot_p90_ms'] / base['tpot_p90_ms'], 3)}; "
            f"dualpath over layerwise {_fmt(dp['tpot_p90_ms'] / lw['tpot_p90_ms'], 3)}: the share of the rise "
            f"path B's relays could account for is the second"
        )
    if dp and base and dp.get("itl_p90_ms") and base.get("itl_p90_ms"):
        # With a few output tokens a turn, TPOT is mostly the hand-off: see `itl_s`.
        out.append(
            f"ITL p90 (the gaps after the second token, the decode step's own pace) dualpath "
            f"{_fmt(dp['itl_p90_ms'], 1)} ms over the baseline's {_fmt(base['itl_p90_ms'], 1)}: "
            f"{_fmt(dp['itl_p90_ms'] / base['itl_p90_ms'], 3)}; the rest of TPOT is the first token's hand-off "
            "to the decode engine"
        )
    return out
