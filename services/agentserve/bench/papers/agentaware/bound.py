"""The job latency no lifecycle policy can beat, and where a measured job's latency went.

The bound: each job's critical path through its DAG of turns when every LLM turn costs only its
own modelled compute (no queueing, no session open, no KV load or transfer, a perfect cache),
and every tool wait takes what the replay measured it to take:

    service(turn) = D * (prefill_s(cached, prompt - cached)
                         + sum_{k=1}^{output-1} decode_step_s([prompt + k]))     batch of one
    ready(turn)   = max(its session's measured start, finish(p) for every prerequisite p)
    finish(turn)  = ready(turn) + service(turn) + tool_s(turn)
    bound(job)    = max finish(turn) over the job's turns - the job's start

`cached` is what the workload's reuse allows (`expected_cached_tokens`) or what the server served
from cache, whichever is more, D the time dilation
(local seconds per target second), prefill_s and decode_step_s the emulated engines' own cost
model (`costmodel.timing`). Batching only lengthens a decode step and caching more than the
workload allows is impossible, so a job cannot finish sooner than its bound under any policy;
1 - mean(bound) / mean(job latency) is the largest reduction any policy could show.

The measured chain: walking back from a job's last turn through the prerequisite that finished
last (the one the turn actually waited for) splits the job's latency exactly into the tool waits
on that chain and the rest (LLM turns with their queueing, opens and KV loads, plus replay gaps).
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

from agentserve.bench.common.workloads.model import Session, Workload, topological_turns, turn_prerequisites
from agentserve.bench.papers.agentaware.workload import job_of
from agentserve.bench.papers.replay.records import SessionRecord, TurnRecord
from agentserve.costmodel.timing import ComputeCost

TurnKey = tuple[str, int]


class ServiceModel(Protocol):
    def of(self, record: TurnRecord) -> float:
        """The turn's minimal service time, local seconds."""
        ...


@dataclass(frozen=True)
class TurnCost:
    """A turn's modelled compute in local seconds: the emulated engines' cost model times D."""

    cost: ComputeCost
    dilation: float

    def service_s(self, prompt_tokens: int, cached_tokens: int, output_tokens: int) -> float:
        cached = min(cached_tokens, prompt_tokens)
        prefill = self.cost.prefill_s(cached, prompt_tokens - cached)
        decode = sum(self.cost.decode_step_s([prompt_tokens + k]) for k in range(1, output_tokens))
        return (prefill + decode) * self.dilation

    def of(self, record: TurnRecord) -> float:
        # The server may have served more from cache than the workload's own reuse (a shared block
        # of an all-gather round): the bound takes whichever is more.
        cached = max(record.expected_cached_tokens, record.cached_tokens)
        return self.service_s(record.prompt_tokens, cached, record.output_tokens)


JobRecords = tuple[dict[str, SessionRecord], dict[TurnKey, TurnRecord]]


def _jobs(workload: Workload, turns: Sequence[TurnRecord], sessions: Sequence[SessionRecord]) -> dict[str, JobRecords]:
    """Job -> (its sessions' records, its turns' records), for jobs whose every turn succeeded."""
    records = {(t.session_id, t.index): t for t in turns}
    starts = {s.session_id: s for s in sessions}
    by_job: dict[str, list[Session]] = {}
    for s in workload.sessions:
        by_job.setdefault(job_of(s.id), []).append(s)
    out = {}
    for job, members in by_job.items():
        keys = [(s.id, i) for s in members for i in range(len(s.turns))]
        if all(k in records and records[k].ok and records[k].done_s is not None for k in keys) and all(
            s.id in starts for s in members
        ):
            out[job] = ({s.id: starts[s.id] for s in members}, {k: records[k] for k in keys})
    return out


def _job_bound(by_id: dict[str, Session], order: list[TurnKey], job: JobRecords, cost: ServiceModel) -> float:
    starts, records = job
    origin = min(r.start_s for r in starts.values())
    finish: dict[TurnKey, float] = {}
    for key in order:  # prerequisites first
        if key not in records:
            continue
        session = by_id[key[0]]
        ready = max([starts[key[0]].start_s - origin, *(finish[p] for p in turn_prerequisites(by_id, session, key[1]))])
        finish[key] = ready + session.turns[key[1]].think_s + cost.of(records[key]) + records[key].tool_s
    return max(finish.values())


def job_bounds(
    workload: Workload, turns: Sequence[TurnRecord], sessions: Sequence[SessionRecord], cost: ServiceModel
) -> dict[str, float]:
    """Job -> its latency bound (local seconds), for jobs whose every turn succeeded."""
    by_id, order = workload.by_id(), topological_turns(workload)
    return {job: _job_bound(by_id, order, records, cost) for job, records in _jobs(workload, turns, sessions).items()}


def measured_chains(
    workload: Workload, turns: Sequence[TurnRecord], sessions: Sequence[SessionRecord], cost: ServiceModel
) -> dict[str, dict[str, float]]:
    """Job -> its measured critical chain: latency, tool_s (tool waits on the chain), llm_s (the
    rest), modelled_compute_s (the chain's turns' modelled compute, part of llm_s)."""
    by_id = workload.by_id()
    out = {}
    for job, (starts, records) in _jobs(workload, turns, sessions).items():
        origin = min(r.start_s for r in starts.values())
        key = max(records, key=lambda k: records[k].done_s or 0.0)
        latency = (records[key].done_s or 0.0) - origin
        tool = compute = 0.0
        while True:
            tool += records[key].tool_s
            compute += cost.of(records[key])
            needs = turn_prerequisites(by_id, by_id[key[0]], key[1])
            if not needs:
                break
            key = max(needs, key=lambda k: records[k].done_s or 0.0)
        out[job] = {"latency_s": latency, "tool_s": tool, "llm_s": latency - tool, "modelled_compute_s": compute}
    return out


def bound_figures(
    workload: Workload, turns: Sequence[TurnRecord], sessions: Sequence[SessionRecord], cost: ServiceModel
) -> dict:
    """A run's bound (mean over its done jobs) and its measured chains' split, as shares of the
    chains' latency (tool + llm = 1; modelled compute is part of llm)."""
    bounds = job_bounds(workload, turns, sessions, cost)
    chains = measured_chains(workload, turns, sessions, cost)
    latency = sum(c["latency_s"] for c in chains.values())

    def share(part: str) -> float | None:
        return sum(c[part] for c in chains.values()) / latency if latency > 0 else None

    return {
        "job_latency_bound_mean_s": statistics.fmean(bounds.values()) if bounds else None,
        "job_latency_bounds_s": sorted(bounds.values()),
        # A job measured faster than its bound would mean the model is no bound: 0 in every run.
        "jobs_below_bound": sum(chains[j]["latency_s"] < b - 1e-9 for j, b in bounds.items()),
        "chain_tool_share": share("tool_s"),
        "chain_llm_share": share("llm_s"),
        "chain_modelled_compute_share": share("modelled_compute_s"),
    }
