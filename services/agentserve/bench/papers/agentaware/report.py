"""`bench agentaware`'s report: JSON (everything) and Markdown (the must-show table, the per
policy table at every rate, the regime), plus the plots."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from agentserve.bench.common.report_files import write_report_files


def write_report(result: dict, out_dir: Path) -> None:
    write_report_files("agentaware", result, out_dir, _plots, markdown)


def _plots(result: dict, out_dir: Path) -> dict[str, Path]:
    from agentserve.bench.papers.agentaware import plots  # matplotlib: optional

    return plots.bench_plots(result, out_dir)


def _f(value: Any, digits: int = 3) -> str:
    if value is None:
        return "-"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, float):
        return f"{value:.{digits}f}"
    return str(value)


def _mb(value: int | None) -> str:
    return "-" if value is None else f"{value / 1e6:.1f}"


def headline(result: dict) -> list[str]:
    lines = ["| figure (agentserve vs lru) | this run | target | met |", "|---|---|---|---|"]
    for key, v in result.get("targets", {}).items():
        lines.append(f"| `{key}` | {_f(v['value'])} | {v['target']} | {_f(v['met'])} |")
    lines.append(f"| `critical_path_jct_reduction` | {_f(result.get('critical_path_jct_reduction'))} | - | - |")
    lines.append(
        f"| `e2e_latency_reduction_bound` (any policy) | {_f(result.get('e2e_latency_reduction_bound'))} | - | - |"
    )
    lines.append(
        f"| `e2e_latency_reduction_of_reachable` | {_f(result.get('e2e_latency_reduction_of_reachable'))} | - | - |"
    )
    return lines


def limit(result: dict) -> list[str]:
    """Where lru's job latency went at the middle rate, and what no policy can take off it."""
    if result.get("lru_chain_tool_share") is None:
        return []
    below = sum(
        (r.get("bound") or {}).get("jobs_below_bound", 0)
        for p in result["policies"].values()
        for r in p["runs"].values()
    )
    return [
        f"The physical limit (`bound.py`): with every LLM turn costing only its modelled compute, no queueing and "
        f"no KV load, on the tool times each run measured, no policy's mean job latency could go below the "
        f'"bound job s" column; against lru at the middle rate that caps `e2e_latency_reduction` at '
        f"{_f(result.get('e2e_latency_reduction_bound'))}. lru's critical chains there were "
        f"{_f(result['lru_chain_tool_share'])} tool waits and {_f(result.get('lru_chain_llm_share'))} LLM turns "
        f"(of which {_f(result.get('lru_chain_modelled_compute_share'))} the turns' modelled compute). "
        f"Jobs measured faster than their bound, in all runs: {below}.",
        "",
    ]


def policy_rows(result: dict) -> list[str]:
    lines = [
        "| policy | jobs/s | jobs done | turns failed | 429 retries | mean job s | p90 job s | critical JCT s "
        "| prefetch hits | moved returns (resident) | recomputed tok | computed tok "
        "| offload MB | upload MB | store-loaded MB | KV in use | KV held | KV resident | bound job s | tool share |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for name, p in result["policies"].items():
        if p.get("unavailable"):
            lines.append(f"| {name} | unavailable: {'; '.join(p['unavailable'])} |" + " |" * 18)
            continue
        for rate, r in p["runs"].items():
            kv = r.get("kv") or {}
            bound = r.get("bound") or {}
            lines.append(
                f"| {name} | {rate} | {r['jobs_done']} | {r['turns_failed']} | {r.get('turn_retries', '-')} "
                f"| {_f(r['job_latency_mean_s'], 2)} "
                f"| {_f(r['job_latency_p90_s'], 2)} | {_f(r['critical_path_jct_mean_s'], 2)} "
                f"| {r['resident_at_first_token']}/{r['returning_turns']} "
                f"| {r.get('returning_turns_on_another_engine', '-')} ({r.get('resident_on_another_engine', '-')}) "
                f"| {r['recomputed_tokens']} "
                f"| {r['computed_prompt_tokens']} | {_mb(r['offload_bytes'])} | {_mb(r['upload_bytes'])} "
                f"| {_mb(r['store_loaded_bytes'])} | {_f(kv.get('kv_utilization'))} | {_f(kv.get('kv_held'))} "
                f"| {_f(kv.get('kv_occupancy'))} | {_f(bound.get('job_latency_bound_mean_s'), 2)} "
                f"| {_f(bound.get('chain_tool_share'))} |"
            )
    return lines


def markdown(result: dict) -> str:
    regime = result["regime"]
    shape = regime["workload_shape"]
    lines = [
        "# agentserve bench agentaware",
        "",
        f"Policies compared against `lru` at {result.get('compared_at_rate_jobs_per_s')} jobs/s (the middle rate).",
        "",
        *headline(result),
        "",
        *limit(result),
        "## Every policy at every rate",
        "",
        *policy_rows(result),
        "",
        "## Regime",
        "",
        f"- workload: {shape['jobs']} jobs ({shape['jobs_by_shape']}), {shape['agents']} agents "
        f"({shape['critical_agents']} on critical paths), {shape['turns']} turns, {shape['tool_calls']} tool calls "
        f"drawn from {regime['tool_sample']['source']} ({regime['tool_sample']['calls']} calls, median "
        f"{regime['tool_sample']['median_s']} s, mean {regime['tool_sample']['mean_s']} s, max "
        f"{regime['tool_sample']['max_s']} s), predictions `{regime['workload']['prediction']}`",
        f"- KV budget: {regime.get('kv_budget')}",
        f"- arrivals: Poisson, {regime['rates_jobs_per_s']} jobs per local second; time dilation "
        f"{regime['time_dilation']} (local s per target s; tool times multiplied by it)",
        f"- cluster: {regime['cluster']['prefill_engines']} prefill + {regime['cluster']['decode_engines']} decode "
        f"engines, profile {regime['cluster']['profile']}, {regime['cluster']['kv_block_tokens']}-token blocks, "
        f"compute {regime.get('compute')} ({regime.get('target_model')} on {regime.get('target_gpu')})",
        f"- machine: {result['machine']}; wall {result['wall_s']} s",
        "",
    ]
    if result.get("files"):
        lines += [f"![{k}]({Path(v).name})" for k, v in result["files"].items()]
    return "\n".join(lines) + "\n"
