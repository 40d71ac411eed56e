"""One simulated run: a workload's agents on a cluster under one policy set, to the last turn.

The result carries every turn as the replay's `TurnRecord` (so the SLO, percentiles and figures are
the benches' own definitions) and what each storage NIC moved.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from agentserve.bench.common.stats import percentile
from agentserve.bench.common.workloads.model import Workload
from agentserve.bench.papers.replay.records import TurnRecord
from agentserve.sim.agents import Agents
from agentserve.sim.cluster import SimCluster
from agentserve.sim.config import SimConfig
from agentserve.sim.events import EventLoop
from agentserve.sim.policies import PolicySet
from agentserve.sim.turn import SimTurn


@dataclass(frozen=True)
class RunResult:
    records: list[TurnRecord]
    duration_s: float  # virtual: the first arrival to the last turn's end
    snic_bytes: dict[str, float]  # by node
    snic_rates: dict[str, float]  # by node: bytes/s of its storage NICs
    bytes_by_path: dict[str, int]
    prefill_busy_s: float  # summed over prefill GPUs
    decode_busy_s: float
    events: int
    wall_s: float


ClusterFactory = Callable[[EventLoop, SimConfig, PolicySet, Callable[[SimTurn], None]], SimCluster]


def simulate(
    config: SimConfig,
    policy: PolicySet,
    workload: Workload,
    arrivals: list[float] | None = None,
    tool_wait_s: float | None = 0.0,
    seed: int = 0,
    *,
    cluster_factory: ClusterFactory = SimCluster,
    on_start: Callable[[EventLoop, SimCluster, Agents], None] | None = None,
) -> RunResult:
    """Run `workload`'s agents (arriving at `arrivals`, default all at 0) to their last turn.

    `tool_wait_s`: the mean of the exponential wait between an agent's turns; None: the workload's
    own tool and think times. `cluster_factory` builds the cluster (a subclass that adds and drains
    engines, `plan/elastic.py`); `on_start(loop, cluster, agents)` runs before the first event, to
    schedule events of its own (a scaling controller)."""
    started = time.monotonic()
    loop = EventLoop()
    done: list[SimTurn] = []
    holder: list[Agents] = []

    def turn_done(turn: SimTurn) -> None:
        done.append(turn)
        holder[0].turn_done(turn)

    cluster = cluster_factory(loop, config, policy, turn_done)
    agents = Agents(
        loop,
        workload,
        arrivals if arrivals is not None else [0.0] * len(workload.sessions),
        tool_wait_s,
        seed,
        config.block_size,
        policy.scheduler.tail_blocks,
        cluster.submit,
        policy.turn_order.rank,
    )
    holder.append(agents)
    if on_start is not None:
        on_start(loop, cluster, agents)
    loop.run()
    expected = sum(len(s.turns) for s in workload.sessions)
    if len(done) != expected:
        raise RuntimeError(f"simulation ended with {len(done)} of {expected} turns done (a turn never finished)")
    first = min(a.arrival_s for a in agents.agents)
    return RunResult(
        records=[_record(t) for a in agents.agents for t in a.turns],
        duration_s=max(t.done_s or 0.0 for t in done) - first,
        snic_bytes={node: link.bytes_total for node, link in cluster.snics.items()},
        snic_rates={node: link.bytes_per_s for node, link in cluster.snics.items()},
        bytes_by_path=dict(cluster.bytes_by_path),
        prefill_busy_s=sum(p.busy_s for p in cluster.prefills.values()),
        decode_busy_s=sum(d.busy_s for d in cluster.decodes.values()),
        events=loop.events_run,
        wall_s=time.monotonic() - started,
    )


def _record(turn: SimTurn) -> TurnRecord:
    placement = turn.placement
    return TurnRecord(
        session_id=turn.agent.spec.id,
        index=turn.index,
        first=turn.index == 0,
        sent_s=turn.submitted_s,
        prompt_tokens=turn.prompt_tokens,
        output_tokens=turn.output_tokens,
        cached_tokens=turn.cached_tokens,
        expected_cached_tokens=turn.cached_tokens,
        first_token_s=turn.first_token_s,
        last_token_s=turn.last_token_s,
        done_s=turn.done_s,
        prefill_engine=placement.prefill.engine_id if placement else "",
        decode_engine=placement.decode.engine_id if placement else "",
        loaded_blocks=placement.hit_blocks if placement else 0,
    )


def _ms(values: list[float], p: float) -> float | None:
    value = percentile(values, p)
    return None if value is None else round(value * 1000, 3)


def figures(result: RunResult) -> dict[str, Any]:
    """The keys `bench dualpath` reports per policy (`metrics.run_figures`), from a simulated run."""
    records = result.records
    ttft = [r.ttft_s for r in records if r.ttft_s is not None]
    tpot = [r.tpot_s for r in records if r.tpot_s is not None]
    duration = result.duration_s
    prompt = sum(r.prompt_tokens for r in records)
    cached = sum(r.cached_tokens for r in records)
    util = {
        node: b / (result.snic_rates[node] * duration) if duration else 0.0 for node, b in result.snic_bytes.items()
    }
    shares = list(util.values())
    avg = sum(shares) / len(shares) if shares else 0.0
    agents: dict[str, float] = {}
    for r in records:
        agents[r.session_id] = max(agents.get(r.session_id, 0.0), r.done_s or 0.0)
    ends = sorted(agents.values())
    return {
        "jct_s": round(duration, 6),
        "turns_total": len(records),
        "turns_ok": sum(r.ok for r in records),
        "turns_failed": sum(not r.ok for r in records),
        "turns_per_s": round(len(records) / duration, 6) if duration else None,
        "prompt_tokens_per_s": round(prompt / duration, 3) if duration else None,
        "computed_prompt_tokens_per_s": round((prompt - cached) / duration, 3) if duration else None,
        "hit_ratio": round(cached / prompt, 6) if prompt else None,
        "ttft_p50_ms": _ms(ttft, 50),
        "ttft_p90_ms": _ms(ttft, 90),
        "tpot_p50_ms": _ms(tpot, 50),
        "tpot_p90_ms": _ms(tpot, 90),
        "agent_completion_s": {"p50": percentile(ends, 50), "max": ends[-1] if ends else None},
        "snic": {
            "utilization": {node: round(u, 6) for node, u in util.items()},
            "max": round(max(shares), 6) if shares else None,
            "avg": round(avg, 6),
            "max_over_avg": round(max(shares) / avg, 6) if avg else None,
        },
        "kv_bytes_by_path": result.bytes_by_path,
        "prefill_gpu_busy": round(result.prefill_busy_s / duration, 6) if duration else None,
        "decode_gpu_busy": round(result.decode_busy_s / duration, 6) if duration else None,
        "events": result.events,
    }
