"""PNG plots of a replay or a capacity search (matplotlib, imported only when plotting)."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from agentserve.bench.common.plots import pyplot, saved
from agentserve.bench.common.stats import ecdf
from agentserve.bench.papers.replay.records import TurnRecord

COLORS = {"first": "#1f77b4", "later": "#d62728"}
LOAD_LABELS = {
    "rate": "open-loop arrival rate (jobs/s)",
    "concurrency": "closed-loop jobs in flight",
    "speedup": "speedup of the recorded schedule (x)",
}
PATH_COLORS = {
    "A": "#1f77b4",
    "B": "#17becf",
    "handoff": "#ff7f0e",
    "persist": "#2ca02c",
    "offload": "#9467bd",
    "prefetch": "#8c564b",
    "relay": "#7f7f7f",
}


def latency_cdfs(turns: Sequence[TurnRecord], out: Path, title: str) -> Path:
    """TTFT, time to second token, TPOT and end-to-end latency CDFs, first vs later turns."""
    plt = pyplot()
    ok = [t for t in turns if t.ok]
    fig, axes = plt.subplots(1, 4, figsize=(17, 4.2))
    for ax, (metric, label) in zip(
        axes,
        (
            ("ttft", "time to first token"),
            ("tt2t", "time to second token"),
            ("tpot", "time per output token"),
            ("e2e", "end-to-end turn latency"),
        ),
    ):
        drawn: list[float] = []
        for kind, first in (("first", True), ("later", False)):
            values = [getattr(t, f"{metric}_s") for t in ok if t.first == first]
            xs, ys = ecdf(v * 1000 for v in values if v is not None)
            if xs:
                ax.step(xs, ys, where="post", color=COLORS[kind], linewidth=1.8, label=f"{kind} turns (n={len(xs)})")
                drawn += xs
        positive = [x for x in drawn if x > 0]
        if positive and max(positive) > 30 * min(positive):  # spans decades: a log axis keeps both ends readable
            ax.set_xscale("log")
        ax.set_title(label)
        ax.set_xlabel("ms" + (" (log scale)" if ax.get_xscale() == "log" else ""))
        ax.set_ylim(0, 1.02)
        ax.axhline(0.9, color="grey", linestyle=":", linewidth=1)
        ax.grid(alpha=0.3)
        if ax.get_legend_handles_labels()[0]:
            ax.legend(loc="upper left", fontsize=9)  # a CDF leaves its upper left empty
    axes[0].set_ylabel("fraction of turns")
    fig.suptitle(title)
    return saved(plt, fig, out, dpi=110)


def kv_bytes_timeline(timeline: dict, out: Path, title: str) -> Path | None:
    """KV bytes moved per time bin, stacked by path; None when there is nothing to draw."""
    if not timeline or not timeline.get("t_s"):
        return None
    series = {p: v for p, v in timeline["by_path"].items() if any(v)}
    if not series:
        return None
    plt = pyplot()
    t = timeline["t_s"]
    bin_s = timeline.get("bin_s")
    widths = [bin_s] * len(t) if bin_s else [b - a for a, b in zip([0.0, *t[:-1]], t)]
    fig, ax = plt.subplots(figsize=(11.5, 4.5))
    bottom = [0.0] * len(t)
    for path, values in series.items():
        mb_s = [v / 1e6 / w if w else 0.0 for v, w in zip(values, widths)]
        ax.bar(
            [x - w for x, w in zip(t, widths)],
            mb_s,
            width=widths,
            bottom=bottom,
            align="edge",
            color=PATH_COLORS.get(path),
            label=f"{path} ({sum(values) / 1e6:.1f} MB)",
            edgecolor="none",
        )
        bottom = [b + m for b, m in zip(bottom, mb_s)]
    ax.set_xlabel("replay time (s)")
    ax.set_ylabel("KV MB/s")
    ax.set_title(title)
    ax.grid(alpha=0.3, axis="y")
    ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0), fontsize=9, title="path (total)")
    return saved(plt, fig, out, dpi=110)


def capacity_curve(
    probes: Sequence[dict], slo: dict, capacity: float | None, load_name: str, out: Path, title: str
) -> Path:
    """Throughput and goodput vs load; the share of turns meeting every term vs load; each SLO
    term's value at its percentile vs load, with its bound (the search's predicate)."""
    plt = pyplot()
    probes = sorted(probes, key=lambda p: p["load"])
    x = [p["load"] for p in probes]
    fig, axes = plt.subplots(1, 3, figsize=(17, 4.5))
    ax = axes[0]
    ax.plot(x, [p["turns_per_s"] for p in probes], "o-", label="throughput (turns/s)")
    ax.plot(x, [p["goodput_turns_per_s"] for p in probes], "s-", label="goodput (turns/s within SLO)")
    ax.set_title("throughput and goodput")
    ax.set_ylabel("turns/s")
    ax = axes[1]
    ax.plot(x, [p["attainment"] * 100 for p in probes], "o-", color="#2ca02c", label="turns meeting every term")
    ax.axhline(
        slo["attainment"] * 100, color="red", linestyle="--", label=f"the strictest term's {slo['attainment']:.0%}"
    )
    ax.set_title("turns meeting every term (goodput's reading)")
    ax.set_ylabel("% of turns")
    ax.set_ylim(0, 102)
    ax = axes[2]
    for (term, bound), style in zip(slo["terms"].items(), ("o-", "s-", "^-", "v-", "D-", "x-"), strict=False):
        # A probe whose failed turns reach the percentile has no finite value: a gap in the line.
        values = [_term_value(p, term) for p in probes]
        line = ax.plot(x, values, style, label=term)[0]
        ax.axhline(bound, color=line.get_color(), linestyle="--", label=f"{term} SLO {bound:g} ms")
    ax.set_title("each SLO term at its percentile, and its bound")
    ax.set_ylabel("ms (log scale)")
    ax.set_yscale("log")
    for ax in axes:
        if capacity is not None:
            ax.axvline(capacity, color="black", linestyle=":", label=f"capacity {capacity:.3g}")
        ax.set_xlabel(LOAD_LABELS.get(load_name, load_name))
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8)
    fig.suptitle(title)
    return saved(plt, fig, out, dpi=110)


def _term_value(probe: dict, term: str) -> float | None:
    check = probe.get("slo_check") or {"terms": []}
    return next((t["value_ms"] for t in check["terms"] if t["term"] == term), None)
