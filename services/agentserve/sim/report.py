"""A simulated run's files: result.json and a Markdown page with the figures beside their targets."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any


def fmt(value: Any, digits: int = 3) -> str:
    return "-" if value is None else f"{value:.{digits}f}" if isinstance(value, float) else str(value)


def markdown(result: dict[str, Any]) -> str:
    lines = [
        "# agentserve sim dualpath",
        "",
        "| figure | value | modelled bound | target | paper | met |",
        "|---|---|---|---|---|---|",
    ]
    limits = result.get("limits") or {}
    for key, v in result["targets"].items():
        bound = fmt((limits.get(key) or {}).get("modelled_bound"))
        lines.append(f"| {key} | {fmt(v['value'])} | {bound} | {v['target']} | {v['paper']} | {v['met']} |")
    lines += ["", "| policy | JCT s | turns/s | TTFT p90 ms | TPOT p90 ms | SNIC max/avg | capacity agents/s |"]
    lines.append("|---|---|---|---|---|---|---|")
    for name, p in result["policies"].items():
        off = p["offline"]
        capacity = (p.get("capacity") or {}).get("capacity_agents_per_s")
        lines.append(
            f"| {name} | {fmt(off['jct_s'], 1)} | {fmt(off['turns_per_s'], 2)} | {fmt(off['ttft_p90_ms'], 1)} | "
            f"{fmt(off['tpot_p90_ms'], 2)} | {fmt(off['snic']['max_over_avg'])} | {fmt(capacity)} |"
        )
    lines += ["", "Bounds (cost model, per later turn):", ""]
    lines += [f"- {k}: {v}" for k, v in result["bounds"].items()]
    return "\n".join(lines) + "\n"


def write_result(result: dict[str, Any], out_dir: Path) -> None:
    out_dir.mkdir(parents=True, exist_ok=True)
    (out_dir / "result.json").write_text(json.dumps(result, indent=2, sort_keys=True) + "\n")
    (out_dir / "README.md").write_text(markdown(result))
