"""PNG plots of `bench agentaware` (matplotlib, imported only when plotting): the decode engines'
KV occupancy over time per policy, and job latency CDFs per policy, one panel per rate, with the
CDF of lru's jobs' bounds (no policy's job can finish sooner: `bound.py`) dashed beside them."""

from __future__ import annotations

from pathlib import Path

from agentserve.bench.common.plots import pyplot, saved

COLORS = {"lru": "#7f7f7f", "ttl-pin": "#1f77b4", "offload": "#2ca02c", "tokencake": "#ff7f0e", "agentserve": "#d62728"}


def _runs(result: dict) -> dict[str, dict[str, dict]]:
    return {n: p["runs"] for n, p in result["policies"].items() if p.get("runs")}


def bench_plots(result: dict, out_dir: Path) -> dict[str, Path]:
    runs = _runs(result)
    if not runs:
        return {}
    return {
        "kv_occupancy": kv_occupancy(runs, out_dir / "kv_occupancy.png"),
        "job_latency_cdf": latency_cdfs(runs, out_dir / "job_latency_cdf.png"),
    }


def _rates(runs: dict[str, dict[str, dict]]) -> list[str]:
    return sorted({r for by_rate in runs.values() for r in by_rate}, key=float)


def kv_occupancy(runs: dict[str, dict[str, dict]], out: Path) -> Path:
    plt = pyplot()
    rates = _rates(runs)
    fig, axes = plt.subplots(len(rates), 1, figsize=(8, 2.6 * len(rates)), squeeze=False)
    for ax, rate in zip(axes[:, 0], rates):
        for name, by_rate in runs.items():
            kv = (by_rate.get(rate) or {}).get("kv") or {}
            color = COLORS.get(name, "#333")
            ax.plot(kv.get("t_s", []), kv.get("occupied_share", []), color=color, label=f"{name} resident")
            ax.plot(kv.get("t_s", []), kv.get("used_share", []), color=color, linestyle=":", label=f"{name} in use")
        ax.set_ylim(0, 1.05)
        ax.set_ylabel("share of decode KV pools")
        ax.set_title(f"{rate} jobs/s")
    axes[-1, 0].set_xlabel("local seconds since the run began")
    axes[0, 0].legend(fontsize=7, ncol=2)
    return saved(plt, fig, out)


def latency_cdfs(runs: dict[str, dict[str, dict]], out: Path) -> Path:
    plt = pyplot()
    rates = _rates(runs)
    fig, axes = plt.subplots(1, len(rates), figsize=(4 * len(rates), 3.6), squeeze=False)
    for ax, rate in zip(axes[0], rates):
        for name, by_rate in runs.items():
            latencies = sorted((by_rate.get(rate) or {}).get("job_latencies_s") or [])
            if latencies:
                ys = [(i + 1) / len(latencies) for i in range(len(latencies))]
                ax.step(latencies, ys, where="post", color=COLORS.get(name, "#333"), label=name)
        bounds = sorted(((runs.get("lru") or {}).get(rate) or {}).get("bound", {}).get("job_latency_bounds_s") or [])
        if bounds:
            ys = [(i + 1) / len(bounds) for i in range(len(bounds))]
            ax.step(bounds, ys, where="post", color="black", linestyle="--", label="bound (any policy)")
        ax.set_xlabel("job latency (local s)")
        ax.set_title(f"{rate} jobs/s")
        ax.set_ylim(0, 1.02)
    axes[0, 0].set_ylabel("share of jobs")
    axes[0, 0].legend(fontsize=8)
    return saved(plt, fig, out)
