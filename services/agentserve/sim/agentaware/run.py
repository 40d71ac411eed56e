"""One simulated run: `bench agentaware`'s jobs arriving at one rate, served under one policy.

Jobs arrive as a Poisson process, or each session at its own given time as a job of its own (the
planner's workloads of independent sessions). A turn is sent its think time after its
prerequisites have finished (its session's previous turn with its tool calls, and every turn or
session in `after`), as the replayer sends it. The router sends a turn to its session's KV
holder, or to the least loaded engine for a session without one. A turn's last token starts its
tool calls (their recorded durations); the lifecycle acts then (`SimParking`). Every turn becomes the replayer's
`TurnRecord` and every session a `SessionRecord`, so job latency, returning turns, token counts
and the latency bound are `bench agentaware`'s own definitions (`bench/papers/agentaware/`).
"""

from __future__ import annotations

import random
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from agentserve.bench.common.stats import percentile
from agentserve.bench.common.workloads.model import Session, Workload, turn_prerequisites
from agentserve.bench.papers.agentaware.bound import TurnCost, bound_figures
from agentserve.bench.papers.agentaware.metrics import job_latencies, returning_turns, token_figures
from agentserve.bench.papers.agentaware.workload import job_of
from agentserve.bench.papers.replay.records import SessionRecord, TurnRecord
from agentserve.scheduler.tool_durations import ToolDurationModel
from agentserve.sim.agentaware.config import AwareConfig
from agentserve.sim.agentaware.engine import AwareEngine
from agentserve.sim.agentaware.parking import SessionKV, SimParking
from agentserve.sim.agentaware.policies import AwarePolicy
from agentserve.sim.agentaware.turn import AwareTurn, context_block_ids
from agentserve.sim.events import EventLoop
from agentserve.sim.nic import SharedLink

TurnKey = tuple[str, int]


@dataclass
class _Agent:
    spec: Session
    kv: SessionKV
    context: int
    next_index: int = 0
    start_s: float | None = None
    end_s: float | None = None


class AwareRun:
    def __init__(
        self,
        config: AwareConfig,
        policy: AwarePolicy,
        workload: Workload,
        rate: float,
        seed: int,
        arrivals: Sequence[float] | None = None,
    ) -> None:
        """`arrivals`: one time per session (workload order), each session its own job; None:
        `job_of` groups sessions into jobs that arrive at `rate` jobs/s."""
        self.config = config
        self.policy = policy
        self.workload = workload
        self.loop = EventLoop()
        cost = config.cost()
        self.links = {
            f"node-{n}": SharedLink(self.loop, f"node-{n}", config.snic_bytes_per_s) for n in range(config.nodes)
        }
        self.engines = {
            f"engine-{i}": AwareEngine(
                f"engine-{i}",
                self.loop,
                cost,
                config.pool_blocks(),
                config.block_size,
                policy,
                self.links[f"node-{i // config.engines_per_node}"],
                config.block_bytes,
                config.chunk_tokens,
                self._turn_done,
            )
            for i in range(config.engines)
        }
        self.parking = SimParking(
            self.loop,
            policy.lifecycle_policy(config.reload_s_per_block),
            ToolDurationModel(),
            self.engines,
            self._least_loaded,
        )
        self.by_id = workload.by_id()
        self.agents = {
            s.id: _Agent(s, SessionKV(s.id, s.critical), workload.prefixes.get(s.prefix or "", 0))
            for s in workload.sessions
        }
        self.job_of = job_of if arrivals is None else _own_job
        self.jobs: dict[str, list[str]] = {}
        for s in workload.sessions:
            self.jobs.setdefault(self.job_of(s.id), []).append(s.id)
        self.finished: set[TurnKey] = set()
        self.records: dict[TurnKey, TurnRecord] = {}
        self.pending: set[TurnKey] = set()  # turns sent or thinking before their send
        self.kv_left: set[TurnKey] = set()  # returning turns whose KV left the engine during the wait
        self.arrived: set[str] = set()
        if arrivals is not None:
            if len(arrivals) != len(workload.sessions):
                raise ValueError(f"arrivals: {len(arrivals)} times for {len(workload.sessions)} sessions")
            for session, at in zip(workload.sessions, arrivals):
                self.loop.at(at, lambda j=session.id: self._arrive(j))  # type: ignore[misc]
        else:
            rng = random.Random(seed)
            at = 0.0
            for job in self.jobs:
                self.loop.at(at, lambda j=job: self._arrive(j))  # type: ignore[misc]
                at += rng.expovariate(rate)
        self.live_tokens = 0
        self.live_tokens_peak = 0

    def _least_loaded(self) -> AwareEngine:
        return min(self.engines.values(), key=lambda e: (e.load, e.engine_id))

    def _arrive(self, job: str) -> None:
        self.arrived.add(job)
        self._release(job)

    def _release(self, job: str) -> None:
        """Send every turn of `job` whose prerequisites have all finished."""
        if job not in self.arrived:
            return
        for session_id in self.jobs[job]:
            agent = self.agents[session_id]
            index = agent.next_index
            if index >= len(agent.spec.turns) or (session_id, index) in self.pending:
                continue
            if all(p in self.finished for p in turn_prerequisites(self.by_id, agent.spec, index)):
                self.pending.add((session_id, index))
                think_s = agent.spec.turns[index].think_s
                if think_s > 0:
                    self.loop.after(think_s, lambda a=agent, i=index: self._send(a, i))  # type: ignore[misc]
                else:
                    self._send(agent, index)

    def _send(self, agent: _Agent, index: int) -> None:
        spec = agent.spec.turns[index]
        now = self.loop.now()
        if agent.start_s is None:
            agent.start_s = now
            self.live_tokens += agent.context
        bs = self.config.block_size
        prompt = agent.context + spec.new_tokens
        prefix = self.workload.prefixes.get(agent.spec.prefix or "", 0)
        turn = AwareTurn(
            session_id=agent.spec.id,
            index=index,
            critical=agent.spec.critical,
            prior_tokens=agent.context,
            prompt_tokens=prompt,
            output_tokens=spec.output_tokens,
            submitted_s=now,
            block_ids=context_block_ids(agent.spec.id, prefix, prompt + spec.output_tokens, bs),
            returning=index > 0 and bool(agent.spec.turns[index - 1].tools),
            kv_left=agent.kv.left,
        )
        self.records[(agent.spec.id, index)] = TurnRecord(
            agent.spec.id, index, index == 0, now, prompt, spec.output_tokens, expected_cached_tokens=agent.context
        )
        engine = self.engines.get(agent.kv.holder) or self._least_loaded()
        engine.submit(turn)

    def _turn_done(self, turn: AwareTurn) -> None:
        agent = self.agents[turn.session_id]
        spec = agent.spec.turns[turn.index]
        bs = self.config.block_size
        record = self.records[(turn.session_id, turn.index)]
        record.cached_tokens = (turn.hit_blocks + turn.loaded_blocks) * bs
        record.handoff_held_blocks = turn.hit_blocks
        record.loaded_blocks = turn.loaded_blocks
        record.first_token_s, record.last_token_s = turn.first_token_s, turn.last_token_s
        record.prefill_engine = record.decode_engine = turn.engine
        record.tool_s = spec.tool_time_s()
        if turn.kv_left:
            self.kv_left.add((turn.session_id, turn.index))
        self.live_tokens += turn.total_tokens - agent.context
        self.live_tokens_peak = max(self.live_tokens_peak, self.live_tokens)
        agent.context = turn.total_tokens
        agent.kv.holder = turn.engine
        prefix = self.workload.prefixes.get(agent.spec.prefix or "", 0)
        agent.kv.block_ids = context_block_ids(agent.spec.id, prefix, agent.context, bs)
        agent.next_index += 1
        if spec.tools:
            self.parking.started(agent.kv, spec.tools[0])  # parked at the first call, as the scheduler does
        self.loop.after(record.tool_s, lambda: self._tools_done(agent, turn.index))

    def _tools_done(self, agent: _Agent, index: int) -> None:
        now = self.loop.now()
        record = self.records[(agent.spec.id, index)]
        record.done_s = now
        for tool in agent.spec.turns[index].tools:
            self.parking.finished(agent.kv, tool)
        self.finished.add((agent.spec.id, index))
        if agent.next_index >= len(agent.spec.turns):
            agent.end_s = now
            self.live_tokens -= agent.context
        self._release(self.job_of(agent.spec.id))

    def serve(self) -> float:
        """Run every job to its last turn (`records` then holds each turn); the wall seconds taken."""
        started = time.monotonic()
        self.loop.run()
        expected = self.workload.num_turns
        if len(self.finished) != expected:
            raise RuntimeError(f"simulation ended with {len(self.finished)} of {expected} turns done")
        return time.monotonic() - started

    def run(self) -> dict[str, Any]:
        return self._figures(self.serve())

    def _figures(self, wall_s: float) -> dict[str, Any]:
        turns = list(self.records.values())
        sessions = [
            SessionRecord(a.spec.id, a.start_s or 0.0, a.end_s, turns=len(a.spec.turns)) for a in self.agents.values()
        ]
        duration = max(t.done_s or 0.0 for t in turns)
        for engine in self.engines.values():
            engine.finish_accounting(duration)
        slots = self.config.pool_blocks() * self.config.engines
        useful = sum(e.used_area + e.reused_area for e in self.engines.values())
        e2e, crit = job_latencies(self.workload, sessions)
        jobs = list(e2e.values())
        ttfts = [t.ttft_s for t in turns if t.ttft_s is not None]
        left = [self.records[k] for k in sorted(self.kv_left)]
        hit = [t for t in left if t.handoff_held_blocks >= t.expected_cached_tokens // self.config.block_size]
        tokens = token_figures(turns)
        return {
            "policy": self.policy.name,
            "duration_s": round(duration, 6),
            "jobs_done": len(jobs),
            "turns_ok": len(turns),
            "job_latency_mean_s": _round(sum(jobs) / len(jobs) if jobs else None),
            "job_latency_p50_s": _round(percentile(jobs, 50)),
            "job_latency_p90_s": _round(percentile(jobs, 90)),
            "critical_path_jct_mean_s": _round(sum(crit.values()) / len(crit) if crit else None),
            "ttft_p50_s": _round(percentile(ttfts, 50)),
            "ttft_p90_s": _round(percentile(ttfts, 90)),
            "returning_turns_kv_left": len(left),
            "returning_turns_kv_left_resident": len(hit),
            "prefetch_hit_ratio": _round(len(hit) / len(left) if left else None),
            "returning": returning_turns(self.workload, turns, self.config.block_size),
            **tokens,
            "recomputed_tokens": sum(e.recomputed_tokens for e in self.engines.values()),
            "store_loaded_blocks": sum(e.loaded_blocks for e in self.engines.values()),
            "kv": {
                "kv_utilization": _round(useful / (slots * duration) if duration else None),
                "used_share": _round(sum(e.used_area for e in self.engines.values()) / (slots * duration)),
                "reused_share": _round(sum(e.reused_area for e in self.engines.values()) / (slots * duration)),
            },
            "working_set_peak_over_pools": _round(self.live_tokens_peak / (slots * self.config.block_size)),
            "gpu_busy": _round(sum(e.busy_s for e in self.engines.values()) / (self.config.engines * duration)),
            "parking": vars(self.parking.stats).copy(),
            "bound": _bound(self.workload, turns, sessions, TurnCost(self.config.cost(), 1.0)),
            "events": self.loop.events_run,
            "wall_s": round(wall_s, 3),
        }


def _bound(workload: Workload, turns: list[TurnRecord], sessions: list[SessionRecord], cost: TurnCost) -> dict:
    figures = bound_figures(workload, turns, sessions, cost)
    figures.pop("job_latency_bounds_s", None)
    return {k: _round(v) if isinstance(v, float) else v for k, v in figures.items()}


def _round(value: float | None) -> float | None:
    return None if value is None else round(value, 6)


def _own_job(session_id: str) -> str:
    return session_id


def simulate_aware(config: AwareConfig, policy: AwarePolicy, workload: Workload, rate: float, seed: int) -> dict:
    """The figures of `workload`'s jobs arriving at `rate` jobs/s, served under `policy`."""
    return AwareRun(config, policy, workload, rate, seed).run()
