"""Turn records -> the numbers serving engineers read: latency percentiles split into first and
later turns, throughput, goodput against an SLO, cache hits against what the trace allows."""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence

from agentserve.bench.common.stats import PERCENTILES, distribution
from agentserve.bench.papers.replay.records import SessionRecord, TurnRecord
from agentserve.bench.papers.replay.slo import SLO

LATENCIES = ("ttft", "tt2t", "tpot", "itl", "e2e")
SCOPES = {"all": None, "first_turn": True, "later_turns": False}


def latency_table(turns: Sequence[TurnRecord]) -> dict[str, dict[str, dict]]:
    """{metric: {scope: distribution in ms}} over successful turns."""
    ok = [t for t in turns if t.ok]
    table: dict[str, dict[str, dict]] = {}
    for metric in LATENCIES:
        table[metric] = {}
        for scope, first in SCOPES.items():
            chosen = [t for t in ok if first is None or t.first == first]
            table[metric][scope] = distribution((getattr(t, f"{metric}_s") for t in chosen), scale=1000.0)
    return table


def flat_latencies(table: dict[str, dict[str, dict]]) -> dict[str, float | None]:
    """`ttft_p90_first_turn_ms`, `tpot_p90_ms` (all turns), ... for every metric, scope, percentile."""
    out = {}
    for metric, scopes in table.items():
        for scope, dist in scopes.items():
            suffix = "" if scope == "all" else f"_{scope}"
            for p in PERCENTILES:
                out[f"{metric}_p{p}{suffix}_ms"] = dist[f"p{p}"]
    return out


def cache_summary(turns: Sequence[TurnRecord]) -> dict:
    ok = [t for t in turns if t.ok]
    prompt = sum(t.prompt_tokens for t in ok)
    cached = sum(t.cached_tokens for t in ok)

    def ratio(first: bool) -> float | None:
        chosen = [t for t in ok if t.first == first]
        p = sum(t.prompt_tokens for t in chosen)
        return sum(t.cached_tokens for t in chosen) / p if p else None

    return {
        "hit_ratio": cached / prompt if prompt else None,
        "hit_ratio_first_turn": ratio(True),
        "hit_ratio_later_turns": ratio(False),
        "cache_match": {
            "cached_tokens": cached,
            # What the workload's reuse allows given the turns finished before each was sent.
            "expected_cached_tokens": sum(t.expected_cached_tokens for t in ok),
            # What the recorded trace's reuse allows (every earlier request, in trace order).
            "trace_cached_tokens": sum(t.trace_cached_tokens for t in ok),
            "turns_exact": sum(t.cached_tokens == t.expected_cached_tokens for t in ok),
            "turns_below_expected": sum(t.cached_tokens < t.expected_cached_tokens for t in ok),
            "turns": len(ok),
        },
        "prompt_tokens": prompt,
        "cached_tokens": cached,
    }


def summarize(
    turns: Sequence[TurnRecord], sessions: Sequence[SessionRecord], duration_s: float, slo: SLO | None
) -> dict:
    ok = [t for t in turns if t.ok]
    failed = [t for t in turns if not t.ok]
    table = latency_table(turns)
    duration = max(duration_s, 1e-9)
    complete = [s for s in sessions if s.end_s is not None and s.failed_turns == 0]
    active = sum(s.duration_s or 0.0 for s in sessions)
    out = {
        "turns_total": len(turns),
        "turns_ok": len(ok),
        "turns_failed": len(failed),
        "failures": dict(
            Counter(
                t.error.split(":")[0] if t.error.startswith("aborted") else t.error[:160] for t in failed
            ).most_common(5)
        ),
        "sessions_total": len(sessions),
        "sessions_failed": sum(s.failed_turns > 0 for s in sessions),
        "duration_s": duration_s,
        **flat_latencies(table),
        "latency_ms": table,
        "session_completion_s": distribution(s.duration_s for s in complete),
        "throughput": {
            "turns_per_s": len(ok) / duration,
            "output_tokens_per_s": sum(t.output_tokens for t in ok) / duration,
            "prompt_tokens_per_s": sum(t.prompt_tokens for t in ok) / duration,
            "computed_prompt_tokens_per_s": sum(t.prompt_tokens - t.cached_tokens for t in ok) / duration,
        },
        "goodput": goodput(turns, duration, slo),
        # Each SLO term at its own percentile, and which binds (`SLO.check`): capacity's predicate.
        "slo_check": slo.check(turns).to_json() if slo is not None else None,
        "tool_wait_share": sum(s.tool_s for s in sessions) / active if active > 0 else None,
        "engines": engine_counts(ok),
    }
    out.update(cache_summary(turns))
    return out


def goodput(turns: Sequence[TurnRecord], duration_s: float, slo: SLO | None) -> dict:
    if slo is None:
        return {"turns_per_s": None, "slo": None, "attainment": None, "meets_slo": None, "reason": "no --slo given"}
    met = sum(slo.met_by(t) for t in turns)
    attainment = met / len(turns) if turns else 0.0
    return {
        "turns_per_s": met / max(duration_s, 1e-9),
        "slo": str(slo),
        "attainment": attainment,
        "meets_slo": bool(turns) and attainment >= slo.attainment,
        "turns_meeting_slo": met,
    }


def engine_counts(turns: Sequence[TurnRecord]) -> dict[str, dict[str, int]]:
    return {
        "prefill": dict(Counter(t.prefill_engine for t in turns if t.prefill_engine)),
        "decode": dict(Counter(t.decode_engine for t in turns if t.decode_engine)),
    }
