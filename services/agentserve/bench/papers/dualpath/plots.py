"""PNG plots of `bench dualpath` (matplotlib, imported only when plotting): offline JCT per policy,
storage-NIC utilisation per engine per policy, capacity probes per policy, and the sweep."""

from __future__ import annotations

from pathlib import Path

from agentserve.bench.common.plots import pyplot, saved

COLORS = {"baseline": "#7f7f7f", "layerwise": "#1f77b4", "dualpath": "#d62728", "dualpath-split": "#ff7f0e"}


def bench_plots(result: dict, out_dir: Path) -> dict[str, Path]:
    runs = {n: p["offline"] for n, p in result["policies"].items() if p["offline"]}
    files = {}
    if runs:
        files["jct"] = jct_bars(runs, out_dir / "jct.png")
        files["snic"] = snic_bars(runs, out_dir / "snic_utilization.png")
    caps = {n: p["capacity"] for n, p in result["policies"].items() if p.get("capacity")}
    if caps:
        files["capacity"] = capacity_probes(caps, out_dir / "capacity.png")
    return files


def jct_bars(runs: dict, out: Path) -> Path:
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(6.5, 4))
    names = list(runs)
    bars = ax.bar(names, [runs[n]["jct_s"] for n in names], color=[COLORS.get(n, "#333") for n in names])
    ax.bar_label(bars, fmt="%.1f s")
    ax.set_ylabel("offline JCT (local s, all agents at once)")
    ax.set_title("job completion time by policy")
    return saved(plt, fig, out)


def snic_bars(runs: dict, out: Path) -> Path:
    plt = pyplot()
    engines = sorted({e for r in runs.values() for e in r["snic"]["utilization"]})
    fig, ax = plt.subplots(figsize=(max(6.5, 1.1 * len(engines) + 2), 4))
    width = 0.8 / max(1, len(runs))
    for i, (name, run) in enumerate(runs.items()):
        util = run["snic"]["utilization"]
        xs = [j + i * width for j in range(len(engines))]
        ax.bar(xs, [util.get(e) or 0.0 for e in engines], width, label=name, color=COLORS.get(name, "#333"))
    ax.set_xticks([j + width * (len(runs) - 1) / 2 for j in range(len(engines))], engines, rotation=30)
    ax.set_ylabel("storage NIC busy share of the run")
    ax.set_ylim(0, 1.05)
    ax.legend()
    ax.set_title("storage NIC utilisation per engine")
    return saved(plt, fig, out)


def capacity_probes(caps: dict, out: Path) -> Path:
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(6.5, 4))
    for name, c in caps.items():
        probes = sorted(c["probes"], key=lambda p: p["load"])
        ax.plot(
            [p["load"] for p in probes],
            [p["attainment"] for p in probes],
            "o-",
            color=COLORS.get(name, "#333"),
            label=f"{name} (capacity {c['capacity_agents_per_s'] or 0:.3g})",
        )
    ax.axhline(0.9, color="#999", linestyle=":", label="SLO attainment needed")
    ax.set_xlabel("agent arrival rate (agents/s, local)")
    ax.set_ylabel("share of turns meeting the SLO")
    ax.set_ylim(0, 1.05)
    ax.legend()
    ax.set_title("online capacity search")
    return saved(plt, fig, out)


def sweep_plot(points: list[dict], out: Path) -> Path:
    """JCT per policy against agents (at the base context) and against context (at the base
    agents), the layout of the paper's offline figure."""
    plt = pyplot()
    fig, axes = plt.subplots(1, 2, figsize=(12, 4.2))
    for ax, axis in zip(axes, ("agents", "final_context")):
        chosen = [p for p in points if p["axis"] == axis]
        for policy in COLORS:
            xs = [p[axis] for p in chosen if p["jct_s"].get(policy)]
            ys = [p["jct_s"][policy] for p in chosen if p["jct_s"].get(policy)]
            if xs:
                ax.plot(xs, ys, "o-", color=COLORS[policy], label=policy)
        ax.set_xscale("log", base=2)
        ax.set_xlabel("agents" if axis == "agents" else "final context (tokens)")
        ax.set_ylabel("offline JCT (local s)")
        ax.legend()
    fig.suptitle("offline JCT by policy")
    return saved(plt, fig, out)
