"""The peer bench's Markdown: one table (a row per figure, a column per system), the regime and
both configurations."""

from __future__ import annotations

# (headline key, label, format); None values print as "-".
ROWS: tuple[tuple[str, str, str], ...] = (
    ("sessions_within_slo", "sessions within SLO", "{:.0f}"),
    ("ttft_later_p50_ms", "later-turn TTFT p50 (ms)", "{:.0f}"),
    ("ttft_later_p90_ms", "later-turn TTFT p90 (ms)", "{:.0f}"),
    ("ttft_first_p50_ms", "first-turn TTFT p50 (ms)", "{:.0f}"),
    ("ttft_first_p90_ms", "first-turn TTFT p90 (ms)", "{:.0f}"),
    ("tpot_p50_ms", "TPOT p50 (ms)", "{:.1f}"),
    ("tpot_p90_ms", "TPOT p90 (ms)", "{:.1f}"),
    ("output_tokens_per_s", "output tokens/s", "{:.1f}"),
    ("computed_prompt_tokens_per_s", "prompt tokens computed/s", "{:.0f}"),
    ("hit_ratio", "prompt tokens from cache", "{:.1%}"),
    ("duration_s", "replay wall time (s)", "{:.1f}"),
    ("rss_peak_mib", "resident memory, RSS peak (MiB)", "{:.0f}"),
    ("pss_peak_mib", "resident memory, PSS peak (MiB)", "{:.0f}"),
    ("cpu_s", "CPU seconds during the replay", "{:.1f}"),
    ("cpu_ms_per_output_token", "CPU ms per output token", "{:.1f}"),
)


def cell(value: object, fmt: str) -> str:
    return "-" if value is None else fmt.format(value)


def table(result: dict) -> str:
    names = list(result["systems"])
    lines = ["| | " + " | ".join(names) + " |", "|---|" + "---|" * len(names)]
    for key, label, fmt in ROWS:
        values = [result["systems"][n]["headline"].get(key) for n in names]
        if key == "sessions_within_slo":
            totals = [result["systems"][n]["headline"]["sessions_total"] for n in names]
            lines.append(f"| {label} | " + " | ".join(f"{cell(v, fmt)} / {t}" for v, t in zip(values, totals)) + " |")
        else:
            lines.append(f"| {label} | " + " | ".join(cell(v, fmt) for v in values) + " |")
    return "\n".join(lines)


def markdown(result: dict) -> str:
    regime = result["regime"]
    w = regime["workload"]
    parts = [
        "# agentserve bench peer",
        "",
        f"Model: `{regime['model']}`. SLO: `{regime['slo']['text']}`, {regime['slo']['judged']}.",
        f"Workload: {w['sessions']} sessions x {w['turns']} turns from `{w['trace']}`, "
        f"token scale {w['token_scale']}; {regime['load']}. API: {regime['api']}.",
        "",
        table(result),
        "",
    ]
    for name, system in result["systems"].items():
        cpu = system["resources"].get("cpu_s") or {}
        parts += [
            f"## {name}",
            "",
            f"Started in {system['startup_s']:.1f} s. CPU seconds by process during the replay:",
        ]
        parts += [f"- {proc}: {secs:.1f}" for proc, secs in sorted(cpu.items(), key=lambda kv: -kv[1])]
        parts += ["", "Configuration:", "", "```"]
        parts += [f"{k}: {v}" for k, v in system["config"].items() if k != "services"]
        parts += [f"{k}: {v}" for k, v in (system["config"].get("services") or {}).items()]
        parts += ["```", ""]
    return "\n".join(parts)
