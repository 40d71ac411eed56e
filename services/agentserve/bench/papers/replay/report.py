"""A replay's or capacity search's results on disk: summary.json, summary.md, per-turn records and
PNG plots."""

from __future__ import annotations

import json
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from agentserve.bench.papers.replay.records import TurnRecord


def _fmt(value: object, digits: int = 1) -> str:
    if value is None:
        return "—"
    if isinstance(value, float):
        return f"{value:,.{digits}f}"
    return f"{value:,}" if isinstance(value, int) else str(value)


def _plot(fn: Callable[..., Path | None], *args: Any) -> Path | None:
    try:
        return fn(*args)
    except ImportError:
        print("agentserve bench: matplotlib is not installed; skipping plots", file=sys.stderr)
        return None


def write_replay(summary: dict, turns: Sequence[TurnRecord], out_dir: Path) -> dict[str, str]:
    from agentserve.bench.papers.replay import plots

    out_dir.mkdir(parents=True, exist_ok=True)
    files = {}
    title = f"{summary['workload']['name']}: {summary['turns_total']} turns"
    cdf = _plot(plots.latency_cdfs, turns, out_dir / "latency_cdf.png", title)
    if cdf:
        files["latency_cdf"] = str(cdf)
    timeline = (summary.get("kv_bytes") or {}).get("timeline")
    kv = _plot(plots.kv_bytes_timeline, timeline, out_dir / "kv_bytes.png", f"KV bytes by path — {title}")
    if kv:
        files["kv_bytes"] = str(kv)
    with (out_dir / "turns.jsonl").open("w") as f:
        for t in turns:
            f.write(json.dumps(t.to_json()) + "\n")
    files["turns"] = str(out_dir / "turns.jsonl")
    summary["files"] = files
    (out_dir / "summary.json").write_text(json.dumps(summary, indent=2))
    (out_dir / "summary.md").write_text(replay_markdown(summary))
    files["summary_json"], files["summary_md"] = str(out_dir / "summary.json"), str(out_dir / "summary.md")
    return files


def replay_markdown(s: dict) -> str:
    w, run = s["workload"], s["run"]
    load = {
        "closed": f"closed loop, {run['concurrency']} jobs in flight",
        "rate": f"open loop, {run['rate']} jobs/s (Poisson)",
        "recorded": "open loop, recorded arrivals",
    }[run["load_model"]]
    lines = [
        f"# agentserve bench replay — {w['name']}",
        "",
        f"- workload: `{w['source']}`, {w['sessions']} sessions, {w['turns']} turns",
        f"- token scale: 1/{w['token_scale']} (every recorded length divided by {w['token_scale']}, outputs "
        f"at least 2 tokens) so that it runs on this machine's CPUs"
        if w["token_scale"] > 1
        else "- token scale: none (lengths as in the workload)",
        f"- load: {load}; time speedup x{run['speedup']:g} (arrivals, think and tool times divided)",
        f"- target: {run['target']}",
        f"- duration: {s['duration_s']:.1f} s; turns {s['turns_total']}, failed **{s['turns_failed']}**; "
        f"sessions {s['sessions_total']}, failed {s['sessions_failed']}",
        "",
        "## Latency (ms)",
        "",
        "| metric | turns | n | p50 | p90 | p99 |",
        "|---|---|---|---|---|---|",
    ]
    for metric, scopes in s["latency_ms"].items():
        for scope, d in scopes.items():
            lines.append(
                f"| {metric} | {scope.replace('_', ' ')} | {d['count']} | {_fmt(d['p50'])} | "
                f"{_fmt(d['p90'])} | {_fmt(d['p99'])} |"
            )
    sc, th, gp = s["session_completion_s"], s["throughput"], s["goodput"]
    lines += [
        "",
        f"Session completion (s): p50 {_fmt(sc['p50'])}, p90 {_fmt(sc['p90'])}, p99 {_fmt(sc['p99'])} "
        f"(n={sc['count']}). Share of session time in tool waits: {_fmt(s['tool_wait_share'], 3)}.",
        "",
        "## Throughput and goodput",
        "",
        f"- {_fmt(th['turns_per_s'], 2)} turns/s, {_fmt(th['output_tokens_per_s'])} output tokens/s, "
        f"{_fmt(th['prompt_tokens_per_s'])} prompt tokens/s ({_fmt(th['computed_prompt_tokens_per_s'])} computed)",
        f"- goodput: {_fmt(gp['turns_per_s'], 2)} turns/s within SLO `{gp['slo']}`; "
        f"{_fmt(gp['attainment'] and gp['attainment'] * 100)}% of turns meet it"
        if gp["slo"]
        else f"- goodput: — ({gp['reason']})",
        "",
        "## Cache",
        "",
    ]
    cm = s["cache_match"]
    lines += [
        f"- hit ratio (prompt tokens from cache): {_fmt(s['hit_ratio'], 3)}; first turns "
        f"{_fmt(s['hit_ratio_first_turn'], 3)}, later turns {_fmt(s['hit_ratio_later_turns'], 3)}",
        f"- cached tokens {cm['cached_tokens']:,} vs {cm['expected_cached_tokens']:,} the workload's reuse allows "
        f"(given the turns finished before each was sent) vs {cm['trace_cached_tokens']:,} by the trace's own "
        f"reuse; {cm['turns_exact']} of {cm['turns']} turns exact, {cm['turns_below_expected']} below",
        f"- by tier: {_tiers(s)}",
        "",
        "## KV bytes by path",
        "",
    ]
    kvp = s["kv_bytes_by_path"]
    if kvp is None:
        lines.append(f"Not available: {s['kv_bytes']['reason']}.")
    else:
        lines += [f"Source: {s['kv_bytes']['source']}.", "", "| path | MB |", "|---|---|"]
        lines += [f"| {p} | {b / 1e6:,.2f} |" for p, b in kvp.items()]
    nic = s["nic_utilization"]
    lines += ["", "## NIC utilisation", ""]
    if nic["per_nic"] is None or nic["max"] is None:
        lines.append(f"Not available: {nic['reason']}.")
    else:
        lines.append(f"max {_fmt(nic['max'], 3)}, mean {_fmt(nic['avg'], 3)} (busy share of the run)")
    if nic["per_nic"]:
        moved = nic.get("bytes_per_nic") or {}
        lines += ["", "| NIC | utilisation | MB moved |", "|---|---|---|"]
        lines += [
            f"| {name} | {_fmt(u, 3) if u is not None else 'unshaped'} | "
            f"{_fmt(moved[name] / 1e6, 2) if name in moved else '—'} |"
            for name, u in nic["per_nic"].items()
        ]
    lines += ["", "## Plots", ""] + [
        f"- ![{k}]({Path(v).name})" for k, v in s.get("files", {}).items() if v.endswith(".png")
    ]
    return "\n".join(lines) + "\n"


def _tiers(s: dict) -> str:
    tiers = s.get("hit_ratio_by_tier")
    if not tiers:
        return f"not available ({s.get('hit_ratio_by_tier_note')})"
    return ", ".join(f"{t} {v:.3f}" for t, v in tiers.items()) + f" ({s.get('hit_ratio_by_tier_note')})"


def capacity_markdown(r: dict) -> str:
    w, slo = r["workload"], r["slo"]
    terms = list(slo["terms"])
    lines = [
        f"# agentserve bench capacity — {w['name']}",
        "",
        f"- workload: `{w['source']}`, {w['sessions']} sessions, {w['turns']} turns"
        + (f", token scale 1/{w['token_scale']}" if w["token_scale"] > 1 else ""),
        "- SLO: "
        + ", ".join(f"{t} <= {b:g} ms" for t, b in slo["terms"].items())
        + " (each over the turns it applies to: first turns, later turns, or all)",
        f"- load: {r['load']}",
        f"- **capacity: {_fmt(r['capacity'], 3)}** (lowest failing load {_fmt(r['lowest_failing_load'], 3)}; "
        f"converged: {r['converged']})",
    ]
    binding = r.get("binding")
    if binding:
        lines.append(
            f"- **binding: {binding['term']}** at load {binding['load']:g} "
            f"({_fmt(binding['value_ms'])} ms against {binding['bound_ms']:g} ms; {binding['why']}; "
            f"failed there: {', '.join(binding['terms_failed']) or 'none'})"
        )
    for role, d in r["per_engine"].items():
        lines.append(f"- per {role} engine ({len(d['engines'])}): {_fmt(d['capacity_per_engine'], 3)}")
    lines += [
        "",
        "| load | meets SLO | binding | "
        + " | ".join(f"{t} ms" for t in terms)
        + " | turns meeting all | goodput turns/s | turns/s | failed |",
        "|---|---|---|" + "---|" * len(terms) + "---|---|---|---|",
    ]
    for p in sorted(r["probes"], key=lambda p: p["load"]):
        check = p["slo_check"]
        values = {t["term"]: t for t in check["terms"]}
        lines.append(
            f"| {p['load']:g} | {'yes' if check['meets'] else 'no'} | {check['binding']} | "
            + " | ".join(_term_cell(values[t]) for t in terms)
            + f" | {p['attainment']:.1%} | {_fmt(p['goodput_turns_per_s'], 2)} | {_fmt(p['turns_per_s'], 2)} | "
            f"{p['turns_failed']} |"
        )
    if r.get("files"):
        lines += ["", f"![capacity]({Path(r['files']['capacity_plot']).name})"]
    return "\n".join(lines) + "\n"


def _term_cell(term: dict) -> str:
    """A term's value in a probe row: n/a without turns to judge, failed when failed turns reach its
    percentile, bold past its bound."""
    if not term["turns"]:
        return "n/a"
    if term["value_ms"] is None:
        return "**failed**"
    return f"{term['value_ms']:.1f}" if term["met"] else f"**{term['value_ms']:.1f}**"
