"""`agentserve sim dualpath --sweep`: the offline comparison over agent counts and final contexts,
the points, table and plot of `bench dualpath --sweep` (`bench/papers/dualpath/sweep.py`), each
point a simulated offline run of every policy."""

from __future__ import annotations

import sys
from dataclasses import replace
from pathlib import Path
from typing import Any

from agentserve.bench.papers.dualpath.sweep import point_workload, sweep_markdown, sweep_points
from agentserve.sim.dualpath import DualPathSimSpec, run_dualpath

POINT_KEYS = (
    "offline_throughput_ratio",
    "split_throughput_ratio",
    "layerwise_jct_reduction",
    "dualpath_jct_reduction_over_layerwise",
    "snic_max_over_avg",
)


def run_sweep(
    spec: DualPathSimSpec, agent_counts: tuple[int, ...], contexts: tuple[int, ...], progress: bool = False
) -> dict[str, Any]:
    points = []
    for axis, agents, context in sweep_points(spec.workload.agents, agent_counts, contexts):
        if progress:
            print(f"sim dualpath --sweep: {agents} agents, final context {context}", file=sys.stderr, flush=True)
        point = replace(spec, workload=point_workload(spec.workload, agents, context), online=False)
        result = run_dualpath(point, progress)
        points.append(
            {
                "axis": axis,
                "agents": agents,
                "final_context": context,
                "jct_s": {n: p["offline"]["jct_s"] for n, p in result["policies"].items()},
                **{key: result[key] for key in POINT_KEYS},
                "bounds": result["bounds"],
            }
        )
    return {"regime": {"cluster": spec.config.to_dict(), "base_workload": spec.workload.to_dict()}, "points": points}


def write_sweep(result: dict[str, Any], out_dir: Path) -> None:
    import json

    out_dir.mkdir(parents=True, exist_ok=True)
    (out_dir / "sweep.json").write_text(json.dumps(result, indent=2, sort_keys=True) + "\n")
    (out_dir / "sweep.md").write_text(sweep_markdown(result["points"]))
    try:
        from agentserve.bench.papers.dualpath.plots import sweep_plot

        sweep_plot(result["points"], out_dir / "sweep.png")
    except ImportError:
        print("sim dualpath --sweep: matplotlib is not installed; no plot", file=sys.stderr)
