"""One run's figures (one policy at one arrival rate), from the replay's own records and the
services' /metrics. Definitions:

- job latency: a job's first session start to its last session's end (end-to-end, tool waits in);
  critical-path JCT: the mean completion time (own start to own end) of the job's critical-path
  sessions, the agents a priority-aware scheduler should serve first.
- returning turn: a turn whose session's previous turn called a tool. Its KV is resident at its
  first token when the decode engine already held every full block of the context it reuses
  (`handoff_held_blocks` x block >= the reusable tokens the workload allowed).
- recomputed tokens: prompt tokens the workload allowed to reuse (its own earlier context) that
  were computed again; computed tokens: every prompt token not served from cache.
- KV occupancy: the decode engines' pool slots in use by running sequences (`used`), held idle for
  a parked session's return (`held`: the lifecycle's pins) and resident but evictable (`cached`)
  over their total, sampled from `agentserve_engine_kv_slots`; effective KV utilisation is the
  time-mean of used over total: the share of KV memory doing work (a pinned block is not).
- retries: turns (or their sessions) the server refused for now (429 / RESOURCE_EXHAUSTED, KV
  admission) and the replayer sent again after Retry-After, and the time spent waiting on them.
- offload / upload bytes: blocks the lifecycle dropped from and uploaded into decode pools
  (`agentserve_scheduler_kv_parking_blocks_total`) times the target's bytes per block.
- bound: the job latency no policy can beat and the measured critical chains' split into tool
  and LLM time (`bound.py`).
"""

from __future__ import annotations

import statistics
from collections import defaultdict
from collections.abc import Sequence

from agentserve.bench.common.stats import percentile
from agentserve.bench.common.workloads.model import Workload
from agentserve.bench.papers.agentaware.bound import ServiceModel, bound_figures
from agentserve.bench.papers.agentaware.workload import job_of
from agentserve.bench.papers.replay.prom import Scrape
from agentserve.bench.papers.replay.records import SessionRecord, TurnRecord

KV_SLOTS = "agentserve_engine_kv_slots"
PARKING_BLOCKS = "agentserve_scheduler_kv_parking_blocks_total"


def _mean(values: Sequence[float]) -> float | None:
    return statistics.fmean(values) if values else None


def job_latencies(workload: Workload, sessions: Sequence[SessionRecord]) -> tuple[dict[str, float], dict[str, float]]:
    """(job -> end-to-end latency, job -> critical-path JCT) for every job whose sessions all ended."""
    critical = {s.id for s in workload.sessions if s.critical}
    expected: dict[str, int] = defaultdict(int)
    for s in workload.sessions:
        expected[job_of(s.id)] += 1
    by_job: dict[str, list[SessionRecord]] = defaultdict(list)
    for record in sessions:
        by_job[job_of(record.session_id)].append(record)
    e2e, crit = {}, {}
    for job, records in by_job.items():
        if len(records) != expected[job] or any(r.end_s is None for r in records):
            continue
        start = min(r.start_s for r in records)
        e2e[job] = max(r.end_s for r in records if r.end_s is not None) - start
        spans = [r.end_s - r.start_s for r in records if r.session_id in critical and r.end_s is not None]
        if spans:
            crit[job] = statistics.fmean(spans)
    return e2e, crit


def returning_turns(workload: Workload, turns: Sequence[TurnRecord], block_tokens: int) -> dict:
    """Turns after a tool call, how many found their reusable KV resident on the decode engine, and
    how many were decoded on another engine than the turn before (the KV had to follow them)."""
    by_id = workload.by_id()
    before = {(t.session_id, t.index): t for t in turns}
    total = resident = moved = moved_resident = 0
    for t in turns:
        session = by_id.get(t.session_id)
        if session is None or t.index == 0 or not t.ok or not session.turns[t.index - 1].tools:
            continue
        total += 1
        hit = t.handoff_held_blocks >= t.expected_cached_tokens // block_tokens
        resident += hit
        previous = before.get((t.session_id, t.index - 1))
        if previous is not None and previous.decode_engine and previous.decode_engine != t.decode_engine:
            moved += 1
            moved_resident += hit
    return {
        "returning_turns": total,
        "resident_at_first_token": resident,
        "prefetch_hit_ratio": resident / total if total else None,
        "returning_turns_on_another_engine": moved,
        "resident_on_another_engine": moved_resident,
    }


def token_figures(turns: Sequence[TurnRecord]) -> dict:
    ok = [t for t in turns if t.ok]
    return {
        "prompt_tokens": sum(t.prompt_tokens for t in ok),
        "computed_prompt_tokens": sum(max(0, t.prompt_tokens - t.cached_tokens) for t in ok),
        "recomputed_tokens": sum(max(0, t.expected_cached_tokens - t.cached_tokens) for t in ok),
        "store_loaded_blocks": sum(t.loaded_blocks for t in ok),
    }


def _decode(scrape: Scrape) -> dict[str, dict[str, float]]:
    """Decode engine -> {used, cached, free} slots in one scrape."""
    out: dict[str, dict[str, float]] = {}
    for target, sample in scrape.by_target.items():
        if not target.startswith("decode"):
            continue
        for (name, labels), value in sample.items():
            if name == KV_SLOTS:
                out.setdefault(target, {})[dict(labels)["state"]] = value
    return out


def occupancy(scrapes: Sequence[Scrape], start_unix_s: float) -> dict:
    """The decode pools over time (summed over engines) and the time-means of used and resident."""
    t_s, used, held, resident = [], [], [], []
    for scrape in scrapes:
        engines = _decode(scrape)
        total = sum(sum(e.values()) for e in engines.values())
        if not total:
            continue
        u = sum(e.get("used", 0.0) for e in engines.values())
        h = sum(e.get("held", 0.0) for e in engines.values())
        c = sum(e.get("cached", 0.0) for e in engines.values())
        t_s.append(round(scrape.unix_s - start_unix_s, 3))
        used.append(u / total)
        held.append(h / total)
        resident.append((u + h + c) / total)
    return {
        "t_s": t_s,
        "used_share": used,
        "held_share": held,
        "occupied_share": resident,
        "kv_utilization": _time_mean(t_s, used),
        "kv_held": _time_mean(t_s, held),
        "kv_occupancy": _time_mean(t_s, resident),
    }


def _time_mean(t_s: Sequence[float], values: Sequence[float]) -> float | None:
    """Mean of a sampled step function over [first, last] sample time."""
    if len(values) < 2 or t_s[-1] <= t_s[0]:
        return values[0] if values else None
    area = sum(v * (b - a) for v, a, b in zip(values, t_s, t_s[1:]))
    return area / (t_s[-1] - t_s[0])


def parking_blocks(first: Scrape, last: Scrape) -> dict[str, int]:
    """Blocks dropped (offloaded) and uploaded by the lifecycle between two scrapes."""

    def counts(scrape: Scrape) -> dict[str, float]:
        out: dict[str, float] = defaultdict(float)
        for sample in scrape.by_target.values():
            for (name, labels), value in sample.items():
                if name == PARKING_BLOCKS:
                    out[dict(labels)["direction"]] += value
        return out

    a, b = counts(first), counts(last)
    return {d: int(b.get(d, 0) - a.get(d, 0)) for d in ("dropped", "uploaded")}


def run_figures(  # noqa: PLR0913 - one run's records and the sizes its figures scale by
    workload: Workload,
    turns: Sequence[TurnRecord],
    sessions: Sequence[SessionRecord],
    scrapes: Sequence[Scrape],
    start_unix_s: float,
    duration_s: float,
    block_tokens: int,
    block_bytes: int,
    service: ServiceModel,
) -> dict:
    e2e, crit = job_latencies(workload, sessions)
    jobs = list(e2e.values())
    parked = parking_blocks(scrapes[0], scrapes[-1]) if len(scrapes) >= 2 else {"dropped": 0, "uploaded": 0}
    tokens = token_figures(turns)
    return {
        "duration_s": round(duration_s, 3),
        "jobs_done": len(jobs),
        "turns_ok": sum(t.ok for t in turns),
        "turns_failed": sum(not t.ok for t in turns),
        "turn_retries": sum(t.retries for t in turns),
        "busy_wait_s": round(sum(t.busy_s for t in turns), 3),
        "failures": sorted({t.error for t in turns if not t.ok})[:5],
        "job_latency_mean_s": _mean(jobs),
        "job_latency_p50_s": percentile(jobs, 50),
        "job_latency_p90_s": percentile(jobs, 90),
        "critical_path_jct_mean_s": _mean(list(crit.values())),
        "job_latencies_s": sorted(jobs),
        "ttft_mean_s": _mean([t.ttft_s for t in turns if t.ttft_s is not None]),
        **returning_turns(workload, turns, block_tokens),
        **tokens,
        "store_loaded_bytes": tokens["store_loaded_blocks"] * block_bytes,
        "offload_blocks": parked["dropped"],
        "upload_blocks": parked["uploaded"],
        "offload_bytes": parked["dropped"] * block_bytes,
        "upload_bytes": parked["uploaded"] * block_bytes,
        "kv": occupancy(scrapes, start_unix_s),
        "bound": bound_figures(workload, turns, sessions, service),
    }
