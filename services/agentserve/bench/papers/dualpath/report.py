"""`bench dualpath` results on disk: dualpath.json (everything), dualpath.md (the tables a reader
compares), PNG plots."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from agentserve.bench.common.report_files import write_report_files
from agentserve.bench.papers.dualpath.phases import busiest_engine_share


def _f(value: Any, digits: int = 2) -> str:
    if value is None:
        return "—"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, float):
        return f"{value:,.{digits}f}"
    return str(value)


def write_report(result: dict, out_dir: Path) -> None:
    write_report_files("dualpath", result, out_dir, _plots, markdown)


def _plots(result: dict, out_dir: Path) -> dict[str, Path]:
    from agentserve.bench.papers.dualpath import plots  # matplotlib: optional

    return plots.bench_plots(result, out_dir)


def headline_table(result: dict) -> list[str]:
    lines = ["| figure | this run | target | paper | met |", "|---|---|---|---|---|"]
    for key, v in result["targets"].items():
        lines.append(f"| `{key}` | {_f(v['value'], 3)} | {v['target']} | {v['paper']} | {_f(v['met'])} |")
    if "tpot_p90_ratio_offline" in result:  # TPOT at unequal loads: each policy's own offline pace
        lines.append(f"| `tpot_p90_ratio_offline` | {_f(result['tpot_p90_ratio_offline'], 3)} | — | — | — |")
    return lines


def busiest(util: dict[str, float | None], role: str) -> float | None:
    """The highest busy share among `role`'s engines."""
    shares = [u for e, u in util.items() if e.split("-")[0] == role and u is not None]
    return max(shares) if shares else None


def policy_table(result: dict) -> list[str]:
    lines = [
        "| policy | JCT s | turns ok | turns/s | TTFT p90 ms | TPOT p90 ms | ITL p90 ms | hit | prefill SNIC busy "
        "(max) | decode SNIC busy (max) | prefill SNIC Gbps | decode SNIC Gbps |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for name, p in result["policies"].items():
        run = p["offline"]
        if run is None:
            lines.append(f"| {name} | not run: {'; '.join(p['unavailable'] or ['—'])} ||||||||||| ")
            continue
        util = run["snic"]["utilization"]
        by_role = run["snic"]["bytes_by_role"]
        lines.append(
            f"| {name} | {_f(run['jct_s'], 1)} | {run['turns_ok']}/{run['turns_total']} | {_f(run['turns_per_s'])} | "
            f"{_f(run['ttft_p90_ms'], 0)} | {_f(run['tpot_p90_ms'], 1)} | {_f(run.get('itl_p90_ms'), 1)} | "
            f"{_f(run['hit_ratio'], 3)} | "
            f"{_f(busiest(util, 'prefill'))} | {_f(busiest(util, 'decode'))} | "
            f"{_f(by_role.get('prefill', {}).get('gbps'), 3)} | {_f(by_role.get('decode', {}).get('gbps'), 3)} |"
        )
    return lines


def phases_table(result: dict) -> list[str]:
    """Where a later turn's time went per policy (local seconds, means), and the JCT beside the
    bounds each limit alone allows (`phases.breakdown`)."""
    lines = [
        "| policy | TTFT | of it: prefill queue / load / forward / persist + handoff | decode | gap | "
        "prefill engines: compute / layer wait / other (max) | JCT | bounds: prefill compute / prefill SNIC / "
        "one agent's chain |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for name, p in result["policies"].items():
        tp = (p.get("offline") or {}).get("turn_phases")
        if not tp:
            continue
        c, pre, b = tp["client"], tp["prefill"], tp["bounds"]
        shares = " / ".join(
            _f(busiest_engine_share(tp, k)) for k in ("compute_share", "layer_wait_share", "other_share")
        )
        moves = None if pre.get("persist") is None else pre["persist"] + (pre.get("handoff") or 0.0)
        lines.append(
            f"| {name} | {_f(c['ttft_s'])} | {_f(pre.get('queue'))} / {_f(pre.get('load'))} / "
            f"{_f(pre.get('forward'))} / {_f(moves)} | {_f(tp['scheduler'].get('decode'))} | {_f(c['gap_s'])} | "
            f"{shares} | {_f(b['jct_s'], 1)} | {_f(b['prefill_compute_s'], 1)} / {_f(b['prefill_snic_s'], 1)} / "
            f"{_f(b['agent_chain_s'], 1)} |"
        )
    return lines


def capacity_table(result: dict) -> list[str]:
    lines = [
        "| policy | agents/s at SLO (local) | lowest failing | probes (agents/s: attainment) |",
        "|---|---|---|---|",
    ]
    for name, p in result["policies"].items():
        c = p.get("capacity")
        if not c:
            continue
        probes = ", ".join(
            f"{q['load']:.3g}: {q['attainment']:.0%}" for q in sorted(c["probes"], key=lambda q: q["load"])
        )
        lines.append(
            f"| {name} | {_f(c['capacity_agents_per_s'], 3)} | {_f(c['lowest_failing_agents_per_s'], 3)} | {probes} |"
        )
    return lines


def _machine(m: dict | None) -> str:
    if not m:
        return "this machine"
    return (
        f"{m['cpus']} CPUs (1-minute load average {m['load_avg_1m_start']:.1f} at the start, "
        f"{m['load_avg_1m_end']:.1f} at the end)"
    )


def _online_agents(online: dict) -> str:
    w, shape = online.get("workload"), online.get("workload_shape")
    if not w or not shape:
        return f"agents of {online['turns_per_agent']} turns"
    return (
        f"agents of {w['turns_per_agent']} turns, context {w['first_context_tokens']:,} -> "
        f"{w['final_context_tokens']:,} tokens ({w['shared_prefix_tokens']:,} of it cached before the run), "
        f"hit ratio {shape['hit_ratio']:.3f}"
    )


def _storage_regime(storage: dict | None) -> list[str]:
    """The storage regime, modelled (the later turns' read against compute) and measured (whether
    the baseline's prefill storage NICs were saturated)."""
    if not storage:
        return []
    lines = []
    m = storage.get("modelled")
    if m:
        t, paper = m["later_turn"], m["paper_turn"]
        lines.append(
            f"- storage regime (target time): a later turn reads {t['cached_tokens']:,} cached tokens in "
            f"{t['read_s']:.3f} s over an engine's {m['snic_gbps_per_engine']:g} Gbps storage-NIC share and "
            f"computes {t['new_tokens']:,} new ones in {t['compute_s']:.3f} s: read/compute "
            f"{t['read_over_compute']:.2f}, {t['cache_compute_gb_per_pflop']:.1f} GB/PFLOP (the paper's turn: "
            f"{paper['read_over_compute']:.2f}, {paper['cache_compute_gb_per_pflop']:.1f}); "
            f"{m['agents_per_prefill_engine']:g} agents per prefill engine; saturated, the offline ratio "
            f"could reach {m['ideal_offline_ratio']:.2f}"
        )
    bound = (storage.get("measured") or {}).get("path_a")
    if bound:
        lines.append(
            f"- path A the bottleneck (the {bound['policy']} run's busiest prefill storage NIC >= 0.8 busy): "
            f"{_f(bound['storage_bound'])} ({bound['prefill_snic_busy_max']:.2f})"
        )
    if m:
        lines.append(
            f"- a saturated baseline's prefill storage NICs are busy {m['baseline_prefill_snic_busy_saturated']:.2f} "
            "of the run (it loads a turn's hits, then computes it)"
        )
    return lines


def markdown(result: dict) -> str:
    regime = result["regime"]
    w, shape, cl = regime["workload"], regime["workload_shape"], regime["cluster"]
    online = regime.get("online")
    floor = result.get("cpu_floor")
    lines = [
        "# agentserve bench dualpath",
        "",
        f"- profile: `{regime['profile']}` ({regime['profile_description']}); compute {regime['compute']}"
        + (f", target model {regime['target_model']}" if regime.get("target_model") else ""),
        f"- time dilation: {_f(regime['time_dilation'], 3)} ({regime['time_dilation_note']})",
        f"- engines: {cl['prefill_engines']} prefill, {cl['decode_engines']} decode; KV blocks of "
        f"{cl['kv_block_tokens']} tokens",
        f"- workload: {w['agents']} agents x {w['turns_per_agent']} turns, context {w['first_context_tokens']:,} -> "
        f"{w['final_context_tokens']:,} tokens, ~{w['mean_append_tokens']:.0f} new + {w['output_tokens_per_turn']} "
        f"output tokens a turn; hit ratio the workload allows {shape['hit_ratio']:.3f}",
        f"- online: SLO {regime['slo_target']} in target time = `{online['slo_local']}` local; "
        f"{online['duration_s']:g} s of Poisson agent arrivals per probe, up to {online['max_probes']} probes; "
        + _online_agents(online)
        if online
        else "- online: not run",
        *_storage_regime(result.get("storage_regime")),
        *([f"- policies run {regime['policies_run']}"] if regime.get("policies_run") else []),
        f"- CPU floor: {regime['cpu_floor']}: JCT {_f(floor.get('jct_s'), 1)} s" if floor else "- CPU floor: not run",
        f"- wall time: {result['wall_s']:.0f} s on {_machine(result.get('machine'))}",
        "",
        "## Must show",
        "",
        *headline_table(result),
        "",
        "## Offline (every agent at once)",
        "",
        *policy_table(result),
        "",
        "## Where a later turn's time went (local seconds, means)",
        "",
        *phases_table(result),
        "",
    ]
    if any(p.get("capacity") for p in result["policies"].values()):
        lines += ["## Online capacity", "", *capacity_table(result), ""]
    if result["limits"]:
        lines += ["## What limits the figures that miss", ""]
        for item in result["limits"]:
            lines.append(f"- `{item['key']}` = {_f(item['value'], 3)} (target {item['target']}):")
            lines += [f"  - {reason}" for reason in item["limited_by"] or ["not measured"]]
        lines.append("")
    files = result.get("files") or {}
    if files:
        lines += ["## Plots", ""] + [f"![{k}]({Path(v).name})" for k, v in files.items()]
    return "\n".join(lines) + "\n"
