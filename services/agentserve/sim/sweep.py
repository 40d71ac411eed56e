"""`agentserve sim dualpath --sweep`: the paper's offline figure, every policy's JCT over a grid of
agent counts (64, 256, 512, 1024) and maximum agent lengths (each agent's final context: 32K, 64K,
128K), each point a simulated offline run of every policy. A point's workload is the base one with
its first context and shared prefix in the same proportion to the final context
(`bench/papers/dualpath/sweep.py:point_workload`), so every point's turns have the base's shape.
The figure has one panel of JCT per maximum length (agents on the x axis, as the paper's) and one
of the must-show ratios."""

from __future__ import annotations

import sys
from dataclasses import replace
from pathlib import Path
from typing import Any

from agentserve.bench.papers.dualpath.sweep import point_workload, sweep_markdown
from agentserve.sim.cli_args import SWEEP_AGENTS, SWEEP_CONTEXTS
from agentserve.sim.dualpath import DualPathSimSpec, run_dualpath

POINT_KEYS = (
    "offline_throughput_ratio",
    "split_throughput_ratio",
    "layerwise_jct_reduction",
    "dualpath_jct_reduction_over_layerwise",
    "snic_max_over_avg",
)


def grid(agent_counts: tuple[int, ...], contexts: tuple[int, ...]) -> list[tuple[int, int]]:
    """(agents, final context) of every point: each maximum length, each agent count."""
    return [(agents, context) for context in contexts for agents in agent_counts]


def run_sweep(
    spec: DualPathSimSpec,
    agent_counts: tuple[int, ...] = SWEEP_AGENTS,
    contexts: tuple[int, ...] = SWEEP_CONTEXTS,
    progress: bool = False,
) -> dict[str, Any]:
    points = []
    for agents, context in grid(agent_counts, contexts):
        if progress:
            print(f"sim dualpath --sweep: {agents} agents, final context {context}", file=sys.stderr, flush=True)
        point = replace(spec, workload=point_workload(spec.workload, agents, context), online=False)
        result = run_dualpath(point, progress)
        points.append(
            {
                "agents": agents,
                "final_context": context,
                "jct_s": {n: p["offline"]["jct_s"] for n, p in result["policies"].items()},
                **{key: result[key] for key in POINT_KEYS},
                "bounds": result["bounds"],
                "wall_s": result["wall_s"],
            }
        )
    return {
        "regime": {
            "cluster": spec.config.to_dict(),
            "base_workload": spec.workload.to_dict(),
            "agents": list(agent_counts),
            "final_contexts": list(contexts),
        },
        "points": points,
    }


def write_sweep(result: dict[str, Any], out_dir: Path) -> None:
    import json

    out_dir.mkdir(parents=True, exist_ok=True)
    (out_dir / "sweep.json").write_text(json.dumps(result, indent=2, sort_keys=True) + "\n")
    (out_dir / "sweep.md").write_text(sweep_markdown(result["points"]) + "\n" + ratios_markdown(result["points"]))
    try:
        grid_plot(result["points"], out_dir / "sweep.png")
    except ImportError:
        print("sim dualpath --sweep: matplotlib is not installed; no plot", file=sys.stderr)


def ratios_markdown(points: list[dict[str, Any]]) -> str:
    def f(x: float | None) -> str:
        return "—" if x is None else f"{x:.3f}"

    lines = [
        "| agents | final context | throughput ratio (bound) | layerwise reduction (bound) "
        "| dualpath over layerwise (bound) | SNIC max/avg |",
        "|---|---|---|---|---|---|",
    ]
    for p in points:
        b = p["bounds"]
        lines.append(
            f"| {p['agents']} | {p['final_context']:,} | {f(p['offline_throughput_ratio'])} "
            f"({f(b['offline_ratio_bound'])}) | {f(p['layerwise_jct_reduction'])} "
            f"({f(b['layerwise_jct_reduction_bound'])}) | {f(p['dualpath_jct_reduction_over_layerwise'])} "
            f"({f(b['dualpath_jct_reduction_over_layerwise_bound'])}) | {f(p['snic_max_over_avg'])} |"
        )
    return "\n".join(lines) + "\n"


def grid_plot(points: list[dict[str, Any]], out: Path) -> Path:
    """Top row: JCT per policy against agents, one panel per maximum agent length (the paper's
    offline figure). Bottom row: DualPath's throughput over the baseline's and its JCT reduction
    over layerwise, with the cost model's bounds dashed."""
    from agentserve.bench.common.plots import pyplot, saved
    from agentserve.bench.papers.dualpath.plots import COLORS

    plt = pyplot()
    contexts = sorted({p["final_context"] for p in points})
    fig, axes = plt.subplots(2, len(contexts), figsize=(4.6 * len(contexts), 7.6), squeeze=False)
    for col, context in enumerate(contexts):
        chosen = sorted((p for p in points if p["final_context"] == context), key=lambda p: p["agents"])
        agents = [p["agents"] for p in chosen]
        top, bottom = axes[0][col], axes[1][col]
        for policy, color in COLORS.items():
            ys = [p["jct_s"].get(policy) for p in chosen]
            if any(y is not None for y in ys):
                top.plot(agents, ys, "o-", color=color, label=policy)
        top.set_xscale("log", base=2)
        top.set_xticks(agents, [str(a) for a in agents])
        top.set_title(f"max agent length {context // 1024}K")
        top.set_xlabel("agents")
        top.set_ylabel("offline JCT (s)")
        for key, bound, color, label in (
            ("offline_throughput_ratio", "offline_ratio_bound", "#d62728", "throughput ratio"),
            (
                "dualpath_jct_reduction_over_layerwise",
                "dualpath_jct_reduction_over_layerwise_bound",
                "#1f77b4",
                "JCT reduction over layerwise",
            ),
        ):
            bottom.plot(agents, [p[key] for p in chosen], "o-", color=color, label=label)
            bottom.plot(agents, [p["bounds"][bound] for p in chosen], "--", color=color, alpha=0.6)
        bottom.set_xscale("log", base=2)
        bottom.set_xticks(agents, [str(a) for a in agents])
        bottom.set_xlabel("agents")
        bottom.set_ylabel("dualpath vs baseline / layerwise (dashed: bound)")
    axes[0][0].legend()
    axes[1][0].legend()
    fig.suptitle("agentserve sim dualpath --sweep: offline JCT by policy")
    return saved(plt, fig, out)
