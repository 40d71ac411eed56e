"""`bench dualpath --sweep`: the offline comparison over agent counts (64, 256, 1024 at a 32K final
context) and final contexts (32K, 64K, 128K at the invocation's agents), as in the paper's offline
figure. Each point is a full offline run of every policy; long (hours at 1024 agents), not in CI.
`--sweep-agents` / `--sweep-contexts` choose other points (a short sweep on a small machine)."""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
from dataclasses import replace
from pathlib import Path

from agentserve.bench.papers.dualpath.bench import run_bench
from agentserve.bench.papers.dualpath.workload import AgentWorkloadSpec

AGENTS = (64, 256, 1024)
CONTEXTS = (32768, 65536, 131072)


def sweep_points(
    agents: int, agent_counts: tuple[int, ...] = AGENTS, contexts: tuple[int, ...] = CONTEXTS
) -> list[tuple[str, int, int]]:
    """(axis, agents, final context) of every point (first context and shared prefix in the
    invocation's proportion to the final one): each agent count at the first context, then each
    context at the invocation's `agents`."""
    return [("agents", a, contexts[0]) for a in agent_counts] + [("final_context", agents, c) for c in contexts]


def point_workload(base: AgentWorkloadSpec, agents: int, final_context: int) -> AgentWorkloadSpec:
    """`base` with `agents` agents growing to `final_context`: the first context and the shared
    prefix keep their share of the final one, so every point's turns have the base's shape."""
    return replace(
        base,
        agents=agents,
        first_context=round(final_context * base.first_context / base.final_context),
        shared_prefix=round(final_context * base.shared_prefix / base.final_context),
        final_context=final_context,
    )


def run_sweep(args: argparse.Namespace, out_dir: Path) -> dict | None:
    from agentserve.bench.papers.dualpath.cli import bench_spec, with_pools

    base = bench_spec(args)
    # One policy at a time: at hundreds of agents a run is CPU-bound, and runs at once would slow each other.
    base = replace(base, online=None, floor_settings=None, concurrent=False)
    points = []
    for axis, agents, context in sweep_points(args.agents, args.sweep_agents, args.sweep_contexts):
        workload = point_workload(base.workload, agents, context)
        print(f"agentserve bench dualpath --sweep: {agents} agents, context {context}", file=sys.stderr)
        spec = with_pools(replace(base, workload=workload), args, agents, context)
        result = asyncio.run(run_bench(spec, progress=args.progress))
        points.append(
            {
                "axis": axis,
                "agents": agents,
                "final_context": context,
                "jct_s": {n: (p["offline"] or {}).get("jct_s") for n, p in result["policies"].items()},
                "offline_throughput_ratio": result["offline_throughput_ratio"],
                "split_throughput_ratio": result["split_throughput_ratio"],
                "layerwise_jct_reduction": result["layerwise_jct_reduction"],
                "dualpath_jct_reduction_over_layerwise": result["dualpath_jct_reduction_over_layerwise"],
                "snic_max_over_avg": result["snic_max_over_avg"],
            }
        )
    out = {"regime": base.regime, "points": points}
    out_dir.mkdir(parents=True, exist_ok=True)
    try:
        from agentserve.bench.papers.dualpath.plots import sweep_plot

        out["files"] = {"sweep": str(sweep_plot(points, out_dir / "sweep.png"))}
    except ImportError:
        print("agentserve bench dualpath: matplotlib is not installed; skipping plots", file=sys.stderr)
    (out_dir / "sweep.json").write_text(json.dumps(out, indent=2))
    (out_dir / "sweep.md").write_text(sweep_markdown(points))
    print(f"agentserve bench dualpath --sweep: results in {out_dir}/", file=sys.stderr)
    if args.json:
        return out
    print((out_dir / "sweep.md").read_text())
    return None


def sweep_markdown(points: list[dict]) -> str:
    def f(x: float | None, digits: int = 2) -> str:
        return "—" if x is None else f"{x:.{digits}f}"

    lines = [
        "| agents | final context | JCT baseline s | JCT layerwise s | JCT dualpath s | JCT split s "
        "| throughput ratio | split ratio |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for p in points:
        j = p["jct_s"]
        lines.append(
            f"| {p['agents']} | {p['final_context']:,} | {f(j.get('baseline'), 1)} | {f(j.get('layerwise'), 1)} | "
            f"{f(j.get('dualpath'), 1)} | {f(j.get('dualpath-split'), 1)} | {f(p['offline_throughput_ratio'])} | "
            f"{f(p['split_throughput_ratio'])} |"
        )
    return "\n".join(lines) + "\n"
