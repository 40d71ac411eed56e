"""`sim agentaware`'s files: result.json and a Markdown page with the keys, their bounds and targets."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from agentserve.sim.report import fmt


def markdown(result: dict[str, Any]) -> str:
    rate = result["compared_at_rate_jobs_per_s"]
    lines = [
        "# agentserve sim agentaware",
        "",
        f"agentserve against each baseline at {rate} jobs/s.",
        "",
        "| key | vs vllm | target | vs lru | bound vs lru |",
        "|---|---|---|---|---|",
    ]
    for key, verdict in result["targets"].items():
        lines.append(
            f"| {key} | {fmt(verdict['value'])} | {verdict['target']} | {fmt(result['vs_lru'][key])} | "
            f"{fmt(result['vs_lru'][key + '_bound'])} |"
        )
    lines += ["", "| rate jobs/s | policy | job latency mean s | p90 s | KV utilisation | prefetch hits | GPU busy |"]
    lines.append("|---|---|---|---|---|---|---|")
    for rate_key, policies in result["by_rate"].items():
        for name, s in policies.items():
            lines.append(
                f"| {rate_key} | {name} | {fmt(s['job_latency_mean_s'], 1)} | {fmt(s['job_latency_p90_s'], 1)} | "
                f"{fmt(s['kv_utilization'])} | {fmt(s['prefetch_hit_ratio'])} | {fmt(s['gpu_busy'])} |"
            )
    return "\n".join(lines) + "\n"


def write_report(result: dict[str, Any], out_dir: Path) -> None:
    out_dir.mkdir(parents=True, exist_ok=True)
    (out_dir / "result.json").write_text(json.dumps(result, indent=2, sort_keys=True) + "\n")
    (out_dir / "README.md").write_text(markdown(result))
