"""`bench tokendance` output: JSON, a Markdown page and PNG plots (matplotlib, when installed)."""

from __future__ import annotations

from pathlib import Path

from agentserve.bench.common.plots import pyplot, saved
from agentserve.bench.common.report_files import write_report_files

COLORS = {"prefix": "#7f7f7f", "pic": "#1f77b4", "collective": "#d62728"}


def write_report(result: dict, out_dir: Path) -> None:
    write_report_files("tokendance", result, out_dir, plots, markdown)


def markdown(result: dict) -> str:
    lines = ["# bench tokendance", "", "| figure | this run | target | paper | met |", "|---|---|---|---|---|"]
    for key, v in result["targets"].items():
        lines.append(f"| `{key}` | {v['value']:.3f} | >= {v['target']} | {v['paper']} | {v['met']} |")
    lines += [f"| `mean_kl` | {result['mean_kl']:.5f} | - | - | - |"]
    lines += [
        f"| `storage_reduction_all_kv` | {result['storage_reduction_all_kv']:.3f} | - "
        "| every agent's whole context at the last round, private tokens included | - |"
    ]
    lengths = result.get("top1_agreement_lengths") or []
    lines += [
        f"| `top1_agreement_lengths` | {lengths} | 1K-4K | - | - |",
        f"| `quality_chosen_fraction` | {result.get('quality_chosen_fraction')} | smallest fraction with top-1 "
        ">= 0.95 in every cell | - | - |",
    ]
    lines += [
        f"| `concurrent_agents_ratio_bound` | {result['concurrent_agents_ratio_bound']:.3f} | - "
        "| the most a collective policy could reach at this SLO and budget (bound.py) | - |",
        "",
        "## Regime",
        "",
    ]
    lines += [f"- {k}: {v}" for k, v in result["regime"].items()]
    lines += _served_markdown(result["served_capacity"])
    lines += [
        "",
        "## Capacity at target scale (cost model of the emulated engines)",
        "",
        "| workload | prefix | pic | collective | ratio | limited by |",
    ]
    lines.append("|---|---|---|---|---|---|")
    for name, c in result["capacity"].items():
        m = c["methods"]
        limits = ", ".join(f"{k}: {v['limited_by']}" for k, v in m.items())
        lines.append(
            f"| {name} | {m['prefix']['max_agents']} | {m['pic']['max_agents']} | {m['collective']['max_agents']} "
            f"| {c['ratio']} | {limits} |"
        )
    lines += [
        "",
        "## Storage (what the KV stores hold)",
        "",
        "| workload | fraction | recomputed share | master + diffs (xor-deflate) | on disk | rows raw "
        "| dense-row bound | fraction projected for 11 | measured there |",
    ]
    lines.append("|---" * 9 + "|")
    for name, st in result["storage"].items():
        d, at = st["default"], st.get("at_projected_fraction", {})
        measured = f"{at['storage_reduction']:.2f} at {at['recompute_fraction']}" if at else ""
        lines.append(
            f"| {name} | {d['recompute_fraction']} | {d['recomputed_share']} | {d['storage_reduction']:.2f} "
            f"| {d['storage_reduction_on_disk']:.2f} | {d['storage_reduction_rows']:.2f} | {d['dense_row_bound']:.2f} "
            f"| {d['fraction_for_target']} | {measured} |"
        )
    lines += [
        "",
        "## Round prefill on the real engine",
        "",
        "PIC: a chunk cache (each block computed once per round, alone), each request's recompute on its "
        "own; collective: the round's first prompt gives the masters, the others' recompute one by one or "
        "together (one forward per layer). Fastest of the repeats; KV held in full-token equivalents.",
        "",
        "| workload | round | PIC s | collective one by one s | collective s | speedup | one by one | KV held PIC "
        "| KV held collective |",
    ]
    lines.append("|---|---|---|---|---|---|---|---|---|")
    for p in result["prefill"]:
        lines.append(
            f"| {p['workload']} | {p['round_index']} | {p['per_request_s']} | {p['collective_one_by_one_s']} "
            f"| {p['collective_s']} | {p['prefill_speedup_vs_pic']} | {p['prefill_speedup_one_by_one']} "
            f"| {p['kv_held_tokens_pic']} | {p['kv_held_tokens_collective']} |"
        )
    lines += [
        "",
        "## Over recompute fractions",
        "",
        "| fraction | top-1 | mean KL | "
        + " | ".join(f"{n} storage | {n} capacity ratio" for n in result["capacity"])
        + " |",
    ]
    lines.append("|---" * (3 + 2 * len(result["capacity"])) + "|")
    for row in result["fraction_curve"]:
        cells = [str(row["recompute_fraction"]), str(row.get("top1_agreement", "")), str(row.get("mean_kl", ""))]
        for name in result["capacity"]:
            w = row.get(name, {})
            cells += [str(w.get("storage_reduction", "")), str(w.get("concurrent_agents_ratio", ""))]
        lines.append("| " + " | ".join(cells) + " |")
    lines += _real_quality_markdown(result.get("quality_real"))
    lines += ["", f"Elapsed {result['elapsed_s']} s; load average {result['load_average']}.", ""]
    return "\n".join(lines)


def _real_quality_markdown(real: dict | None) -> list[str]:
    if not real:
        return []
    fractions = real["fractions"]
    lines = [
        "",
        "## Quality on SmolLM2-135M-Instruct at the workloads' lengths (top-1 agreement / mean KL)",
        "",
        f"Chosen fraction (the smallest with top-1 >= {real['top1_floor']} in every cell): {real['chosen_fraction']}.",
        "",
        "| shape | prompt tokens | " + " | ".join(str(f) for f in fractions) + " |",
        "|---|---" + "|---" * len(fractions) + "|",
    ]
    cells = {(c["shape"], c["prompt_tokens"], c["recompute_fraction"]): c for c in real["cells"]}
    for shape, length in dict.fromkeys((c["shape"], c["prompt_tokens"]) for c in real["cells"]):
        row = [cells.get((shape, length, f)) for f in fractions]
        lines.append(
            f"| {shape} | {length} | "
            + " | ".join(f"{c['top1_agreement']} / {c['mean_kl']}" if c else "" for c in row)
            + " |"
        )
    return lines


def _served_markdown(served: dict) -> list[str]:
    lines = ["", "## Capacity served on the trained default model (agents within the SLO)", ""]
    lines += ["| workload | SLO s | KV budget tokens | prefix | pic | collective | ratio | limited by |"]
    lines.append("|---|---|---|---|---|---|---|---|")
    for name, c in served.items():
        m, regime = c["policies"], c["regime"]
        limits = ", ".join(f"{k}: {v['limited_by']}" for k, v in m.items())
        lines.append(
            f"| {name} | {regime['slo_s']:.3f} | {regime['budget_tokens']:.0f} | {m['prefix']['max_agents']} "
            f"| {m['pic']['max_agents']} | {m['collective']['max_agents']} | {c['ratio']} | {limits} |"
        )
    lines += [
        "",
        "The most a collective policy could serve in the same regime, measured in this run (bound.py): the blend's",
        "floor served at the SLO and budget (the bound), and the memory bound (collective's ledger fits the budget:",
        "nothing evicted up to it):",
        "",
        "| workload | measured collective | memory bound | bound | limited by | ratio measured | ratio bound |",
        "|---|---|---|---|---|---|---|",
    ]
    for name, c in served.items():
        b = c["bound"]
        lines.append(
            f"| {name} | {c['policies']['collective']['max_agents']} | {b['memory_bound_agents']} "
            f"| {b['max_agents']} | {b['limited_by']} | {c['ratio']} | {b['concurrent_agents_ratio_bound']} |"
        )
    lines += ["", f"Compute floor: {next(iter(served.values()))['bound']['floor']}." if served else ""]
    lines += [
        "",
        "Agents per policy at each KV budget (fraction of prefix caching's full-residency KV; the same",
        "budget and SLO for every policy; the headline is the row at the default fraction):",
        "",
        "| workload | budget fraction | KV budget tokens | prefix | pic | collective | ratio | limited by |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for name, c in served.items():
        for point in c["budget_sweep"]:
            agents, limits = point["max_agents"], point["limited_by"]
            lines.append(
                f"| {name} | {point['budget_fraction']} | {point['budget_tokens']:.0f} | {agents['prefix']} "
                f"| {agents['pic']} | {agents['collective']} | {point['ratio']} "
                f"| {', '.join(f'{k}: {v}' for k, v in limits.items())} |"
            )
    lines += [
        "",
        "Every probe at the headline budget (worst round latency; the first agent past the SLO ends a probe, so a",
        "missed probe's latency is a lower bound):",
        "",
    ]
    lines += ["| workload | policy | agents | met | worst round s | recomputed history tokens | KV at the end |"]
    lines.append("|---|---|---|---|---|---|---|")
    for name, c in served.items():
        for policy, found in c["policies"].items():
            for probe in found["probes"]:
                recomputed = sum(r["recomputed_history_tokens"] for r in probe["rounds"])
                lines.append(
                    f"| {name} | {policy} | {probe['agents']} | {probe['met']} | {probe['worst_latency_s']} "
                    f"| {recomputed} | {probe['rounds'][-1]['kv_tokens']} |"
                )
    return lines


def plots(result: dict, out_dir: Path) -> dict[str, Path]:
    return {
        "served": _served(result, out_dir / "served.png"),
        "capacity": _capacity(result, out_dir / "capacity.png"),
        "fractions": _fractions(result, out_dir / "fractions.png"),
        "prefill": _prefill(result, out_dir / "prefill.png"),
    }


def _served(result: dict, out: Path) -> Path:
    plt = pyplot()
    served = result["served_capacity"]
    fig, axes = plt.subplots(1, len(served), figsize=(5.5 * len(served), 4), squeeze=False)
    for ax, (name, c) in zip(axes[0], served.items(), strict=True):
        for policy, found in c["policies"].items():
            probes = found["probes"]
            ax.plot(
                [p["agents"] for p in probes],
                [p["worst_latency_s"] for p in probes],
                "o-",
                color=COLORS[policy],
                label=f"{policy}: {found['max_agents']}",
            )
        bound = c.get("bound")
        if bound is not None:
            floor = bound["floor_probes"]
            ax.plot(
                [p["agents"] for p in floor],
                [p["worst_latency_s"] for p in floor],
                "x--",
                color=COLORS["collective"],
                alpha=0.5,
                label=f"blend's floor (the bound): {bound['max_agents']}",
            )
            if bound["memory_bound_agents"] is not None:
                ax.axvline(
                    bound["memory_bound_agents"],
                    color=COLORS["collective"],
                    linestyle="-.",
                    label=f"memory bound: {bound['memory_bound_agents']}",
                )
        ax.axhline(c["regime"]["slo_s"], color="black", linestyle=":", label="SLO")
        ax.set_xlabel("agents")
        ax.set_ylabel("worst round latency (s, engine CPU time)")
        ax.set_title(f"{name}: served at 1/{c['regime']['token_scale']} tokens")
        ax.legend(fontsize=8)
    return saved(plt, fig, out)


def _capacity(result: dict, out: Path) -> Path:
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(6.5, 4))
    names = list(result["capacity"])
    width = 0.8 / 3
    for i, method in enumerate(COLORS):
        values = [result["capacity"][n]["methods"][method]["max_agents"] for n in names]
        bars = ax.bar(
            [j + (i - 1) * width for j in range(len(names))], values, width, label=method, color=COLORS[method]
        )
        ax.bar_label(bars)
    ax.set_xticks(range(len(names)), names)
    ax.set_ylabel("agents served within the SLO")
    ax.set_title("concurrent agents at one KV budget")
    ax.legend()
    return saved(plt, fig, out)


def _fractions(result: dict, out: Path) -> Path:
    plt = pyplot()
    fig, (left, right) = plt.subplots(1, 2, figsize=(11, 4))
    rows = [r for r in result["fraction_curve"] if "top1_agreement" in r]
    xs = [r["recompute_fraction"] for r in rows]
    left.plot(xs, [r["top1_agreement"] for r in rows], "o-", color="#d62728", label="top-1 agreement")
    left.set_xlabel("recompute fraction")
    left.set_ylabel("top-1 agreement")
    kl = left.twinx()
    kl.plot(xs, [r["mean_kl"] for r in rows], "s--", color="#1f77b4", label="mean KL (nats)")
    kl.set_ylabel("mean KL (nats)")
    left.set_title("quality vs full recompute")
    for name in result["capacity"]:
        pts = [(r["recompute_fraction"], r[name]) for r in result["fraction_curve"] if name in r]
        right.plot([p[0] for p in pts], [p[1]["storage_reduction"] for p in pts], "o-", label=f"{name} storage")
        right.plot([p[0] for p in pts], [p[1]["concurrent_agents_ratio"] for p in pts], "s--", label=f"{name} capacity")
    right.set_xlabel("recompute fraction")
    right.set_ylabel("x over prefix caching")
    right.set_title("storage reduction and capacity ratio")
    right.legend(fontsize=8)
    return saved(plt, fig, out)


def _prefill(result: dict, out: Path) -> Path:
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(6.5, 4))
    names = [p["workload"] for p in result["prefill"]]
    ways = (
        ("per_request_s", "PIC (chunk cache)", COLORS["pic"]),
        ("collective_one_by_one_s", "collective, one by one", "#9ecae1"),
        ("collective_s", "collective", COLORS["collective"]),
    )
    for i, (key, label, color) in enumerate(ways):
        bars = ax.bar(
            [j + (i - 1) * 0.27 for j in range(len(names))],
            [p[key] for p in result["prefill"]],
            0.27,
            label=label,
            color=color,
        )
        ax.bar_label(bars, fmt="%.2f", fontsize=7)
    ax.set_xticks(range(len(names)), names)
    ax.set_ylabel("round prefill time (s, this machine)")
    ax.set_title("one gather round on the trained default model")
    ax.legend()
    return saved(plt, fig, out)
