"""`agentserve plan --out DIR`: plan.json, a Markdown page, and the plot of SLO attainment against
GPUs for the top configurations (matplotlib, the optional `bench` extra; skipped with a warning
when absent, as the benches' plots are)."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

from agentserve.bench.common.plots import pyplot, saved

TOP = 4  # configurations (policy set, storage NIC) in the plot


def configuration(t: dict[str, Any]) -> str:
    """A trial's policy set, or `colocated` and its lifecycle policy."""
    return f"{t['policy']} {t['lifecycle']}" if t["colocated_engines"] else t["policy"]


def families(trace: list[dict[str, Any]]) -> dict[tuple[str, float], list[dict[str, Any]]]:
    """Seed-0 trials by configuration, the best attainment at each GPU count, cheapest first."""
    out: dict[tuple[str, float], dict[int, dict[str, Any]]] = {}
    for t in trace:
        best = out.setdefault((configuration(t), t["snic_gbps_per_node"]), {})
        if t["gpus"] not in best or t["attainment"] > best[t["gpus"]]["attainment"]:
            best[t["gpus"]] = t
    return {k: [v[g] for g in sorted(v)] for k, v in out.items()}


def top_families(trace: list[dict[str, Any]], top: int = TOP) -> dict[tuple[str, float], list[dict[str, Any]]]:
    """The configurations whose cheapest passing point is cheapest (then the highest attainment)."""

    def key(item: tuple[tuple[str, float], list[dict[str, Any]]]) -> tuple[float, float]:
        passing = [t["cost_per_hour"] for t in item[1] if t["meets_slo"]]
        return (min(passing) if passing else float("inf"), -max(t["attainment"] for t in item[1]))

    return dict(sorted(families(trace).items(), key=key)[:top])


def engines(t: dict[str, Any]) -> str:
    if t["colocated_engines"]:
        return f"{t['colocated_engines']} colocated engines"
    return f"{t['prefill_engines']} prefill + {t['decode_engines']} decode engines"


def attainment_plot(result: dict[str, Any], out: Path) -> Path:
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(7, 4.2))
    for (policy, snic), points in top_families(result["search"]["trace"]).items():
        ax.plot(
            [p["gpus"] for p in points],
            [p["attainment"] for p in points],
            marker="o",
            label=f"{policy}, SNIC {snic:g} Gbps/node",
        )
    share = result["slo"]["attainment"]
    ax.axhline(share, color="#555", linestyle="--", linewidth=1, label=f"SLO share {share:g}")
    chosen = result.get("deployment")
    if chosen:
        ax.scatter([chosen["gpus"]], [chosen["attainment"]], s=160, facecolors="none", edgecolors="k", zorder=5)
        counts = chosen["colocated_engines"] or f"{chosen['prefill_engines']}P+{chosen['decode_engines']}D"
        ax.annotate(
            f"chosen: {configuration(chosen)} {counts}" + ("E" if chosen["colocated_engines"] else ""),
            (chosen["gpus"], chosen["attainment"]),
            textcoords="offset points",
            xytext=(-40, -28),
            ha="right",
        )
    ax.set_xlabel("GPUs (prefill + decode engines, or colocated engines)")
    ax.set_ylabel("share of turns meeting the SLO")
    ax.set_title(f"SLO attainment against GPUs ({result['slo']['spec']})", fontsize=9)
    ax.legend(fontsize=8)
    return saved(plt, fig, out)


def markdown(result: dict[str, Any]) -> str:
    d, c = result.get("deployment"), result.get("cost")
    lines = ["# agentserve plan", "", f"Workload: {result['workload']}", "", f"SLO: `{result['slo']['spec']}`", ""]
    if d and c:
        lines += [
            f"**Deployment**: {configuration(d)}, {engines(d)}, KV lifecycle {d['lifecycle']} "
            f"({d['gpus']} GPUs, {d['nodes']} nodes), storage NIC {d['snic_gbps_per_node']:g} Gbps per node; "
            f"attainment {d['attainment']} (binds {d['binds']}); consistent: {result['consistent']}",
            "",
            "| cost per hour | per M tokens | per M output tokens | per agent-hour | goodput turns/s per GPU |",
            "|---|---|---|---|---|",
            f"| {c['cost_per_hour']} | {c['cost_per_million_tokens']} | {c['cost_per_million_output_tokens']} | "
            f"{c['cost_per_agent_hour']} | {c['goodput_turns_per_s_per_gpu']} |",
        ]
    else:
        lines.append("No deployment tried meets the SLO.")
    lines += [
        "",
        "| policy | lifecycle | SNIC Gbps | engines | cost/h | attainment | verdict |",
        "|---|---|---|---|---|---|---|",
    ]
    for t in result["search"]["trace"]:
        lines.append(
            f"| {t['policy']} | {t['lifecycle']} | {t['snic_gbps_per_node']:g} | {engines(t)} | "
            f"{t['cost_per_hour']} | {t['attainment']} | {t['verdict']} |"
        )
    return "\n".join(lines) + "\n"


def write(result: dict[str, Any], out_dir: Path, name: str = "plan") -> dict[str, str]:
    out_dir.mkdir(parents=True, exist_ok=True)
    (out_dir / f"{name}.json").write_text(json.dumps(result, indent=2, sort_keys=True) + "\n")
    files = {"json": str(out_dir / f"{name}.json")}
    if "search" in result:
        (out_dir / "README.md").write_text(markdown(result))
        files["markdown"] = str(out_dir / "README.md")
        try:
            files["plot"] = str(attainment_plot(result, out_dir / "attainment.png"))
        except ImportError:
            print("agentserve plan: matplotlib is not installed; no plot", file=sys.stderr)
    return files
