"""Runs of `bench dualpath`: for each policy, one cluster, the offline run (every agent at once)
and, for the policies compared online, a capacity search (agents/s at the SLO) on the same
cluster. The offline run and the capacity search are tenants of their own, and every probe's
agents its own sessions, so no run hits another's cache (a search's probes share only the cached
context its agents start from).

Both runs' shared prefixes (the offline agents' system prompt, the online agents' history so far)
are computed once per cluster, untimed, by `warm` under the tenants the runs then use: the bench
does it while the next clusters start, so that modelled compute (minutes of sleep at time
dilation 10) overlaps the starts' CPU work instead of following them."""

from __future__ import annotations

import asyncio
import math
import sys
import time
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

from agentserve.bench.common import cluster
from agentserve.bench.common.policy import Policy
from agentserve.bench.common.target import Target
from agentserve.bench.papers.dualpath import phases
from agentserve.bench.papers.dualpath.metrics import run_figures
from agentserve.bench.papers.dualpath.workload import AgentWorkloadSpec, generate, late_turns, shape
from agentserve.bench.papers.replay import capacity as cap
from agentserve.bench.papers.replay.replayer import ReplayOptions
from agentserve.bench.papers.replay.run import replay_once, warm
from agentserve.bench.papers.replay.slo import SLO


@dataclass(frozen=True)
class OnlineSpec:
    """The capacity search: Poisson agent arrivals for `duration_s` (local seconds), then every
    started agent runs to its end; a probe passes when its turns meet `slo` (local bounds)."""

    slo: SLO
    duration_s: float = 40.0
    start_rate: float = 0.1  # agents/s, local
    max_rate: float = 0.8
    max_probes: int = 4
    tolerance: float = 0.25
    turns: int = 0  # turns per online agent (the offline agents' last ones); 0 = all of the offline workload's

    def __post_init__(self) -> None:
        if self.duration_s <= 0 or self.start_rate <= 0 or self.max_rate < self.start_rate:
            raise ValueError("online search needs duration > 0 and 0 < start_rate <= max_rate")
        if self.turns < 0:
            raise ValueError(f"online turns must be >= 0 (0 = the offline workload's), got {self.turns}")
        self.search_spec()  # the search's own checks (probes >= 2, ...) here, not minutes into a run

    def workload(self, offline: AgentWorkloadSpec) -> AgentWorkloadSpec:
        """What one probe's agents are: the last `turns` turns of the offline agents (`late_turns`)."""
        return late_turns(offline, self.agents_needed, self.turns or offline.turns)

    @property
    def agents_needed(self) -> int:
        """Agents the fastest probe may start (Poisson arrivals overshoot their mean; 1.5x covers it)."""
        return math.ceil(self.max_rate * self.duration_s * 1.5) + 1

    def search_spec(self) -> cap.SearchSpec:
        return cap.SearchSpec(
            start=self.start_rate,
            max_load=self.max_rate,
            rel_tolerance=self.tolerance,
            max_probes=self.max_probes,
        )

    def to_json(self, offline: AgentWorkloadSpec) -> dict[str, Any]:
        """The search's regime as the bench's JSON states it, beside the offline workload's."""
        workload = self.workload(offline)
        return {
            "slo_local": str(self.slo),
            "duration_s": self.duration_s,
            "start_agents_per_s": self.start_rate,
            "max_agents_per_s": self.max_rate,
            "max_probes": self.max_probes,
            "turns_per_agent": self.turns or offline.turns,
            "tolerance": self.tolerance,
            "agents_available": self.agents_needed,
            "workload": workload.to_dict(),
            "workload_shape": shape(generate(workload)).to_dict(),
        }


@dataclass
class PolicyResult:
    policy: Policy
    offline: dict[str, Any] | None = None
    offline_summary: dict[str, Any] | None = None
    capacity: dict[str, Any] | None = None
    turn_records: list = field(default_factory=list)
    unavailable: list[str] = field(default_factory=list)
    wall_s: float = 0.0
    # Where the wall time went: the cluster's start, the offline run, the capacity search (local s).
    phases_s: dict[str, float] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        """The policy's entry under the bench JSON's `policies`."""
        return {
            "settings": self.policy.to_dict(),
            "unavailable": self.unavailable or None,
            "offline": self.offline,
            "capacity": self.capacity,
            **self.timing_json(),
        }

    def timing_json(self) -> dict[str, Any]:
        """Where the run's wall time went, to 0.1 s (a policy's entry and the CPU floor's)."""
        return {"wall_s": round(self.wall_s, 1), "phases_s": {phase: round(s, 1) for phase, s in self.phases_s.items()}}


def _log(text: str) -> None:
    print(f"agentserve bench dualpath: {text}", file=sys.stderr, flush=True)


@dataclass(frozen=True)
class Tenants:
    """The tenant tags of a cluster's offline run and capacity search (each its own cache)."""

    offline: str
    online: str

    @classmethod
    def new(cls) -> Tenants:
        return cls(f"-{uuid.uuid4().hex[:8]}", f"-online-{uuid.uuid4().hex[:8]}")


async def warm_prefixes(
    target: Target,
    workload: AgentWorkloadSpec,
    online: OnlineSpec | None,
    block_size: int,
    tenants: Tenants,
    offline: bool = True,
) -> float:
    """Compute the offline workload's (when `offline`) and the online agents' (when `online`)
    shared prefixes on `target` under `tenants`; returns the seconds it took."""
    started = time.monotonic()
    # Both at once: two prefills, on the cluster's two prefill engines when the scheduler spreads them.
    warming = []
    if offline:
        options = ReplayOptions(kv_block_tokens=block_size, tenant_tag=tenants.offline)
        warming.append(warm(generate(workload), target, options))
    if online is not None:
        options = ReplayOptions(kv_block_tokens=block_size, tenant_tag=tenants.online)
        warming.append(warm(generate(online.workload(workload)), target, options))
    await asyncio.gather(*warming)
    return time.monotonic() - started


async def start(policy: Policy, spec: cluster.ClusterSpec) -> tuple[Target, float]:
    """`policy`'s cluster, started, and the seconds its start took."""
    started = time.monotonic()
    target = await cluster.start(spec, policy)
    return target, time.monotonic() - started


async def run_policy(  # noqa: PLR0913 - one policy's run and the harness's options, keyword defaults
    policy: Policy,
    spec: cluster.ClusterSpec,
    workload: AgentWorkloadSpec,
    online: OnlineSpec | None,
    progress: bool = False,
    started: tuple[Target, float] | None = None,
    tenants: Tenants | None = None,
    offline: bool = True,
    before_online: Callable[[], Awaitable[object]] | None = None,
) -> PolicyResult:
    """Run `policy` offline (and the capacity search when `online`) on its cluster, then stop it.
    `started`: the cluster already started (and its start's seconds); None: start it here.
    `tenants`: the runs' tenants, whose shared prefixes `warm_prefixes` computed (and its
    seconds); None: new ones, warmed here. `offline` False: the capacity search alone, begun
    once `before_online` (if given) returns; its wait is `phases_s["slot_wait"]`."""
    result = PolicyResult(policy)
    target, start_s = started or await start(policy, spec)
    result.phases_s["start"] = start_s
    began = time.monotonic()
    try:
        if tenants is None:
            tenants = Tenants.new()
            result.phases_s["warm"] = await warm_prefixes(target, workload, online, spec.block_size, tenants, offline)
        if offline:
            await _offline(result, target, workload, spec, tenants, progress)
        if online is not None:
            if before_online is not None:
                mark = time.monotonic()
                await before_online()
                result.phases_s["slot_wait"] = time.monotonic() - mark
            mark = time.monotonic()
            result.capacity = await _capacity(policy, target, workload, online, spec, tenants.online, progress)
            result.phases_s["online"] = time.monotonic() - mark
    finally:
        mark = time.monotonic()
        await target.close()
        result.phases_s["stop"] = time.monotonic() - mark
    result.wall_s = start_s + time.monotonic() - began
    return result


async def _offline(
    result: PolicyResult,
    target: Target,
    workload: AgentWorkloadSpec,
    spec: cluster.ClusterSpec,
    tenants: Tenants,
    progress: bool,
) -> None:
    options = ReplayOptions(kv_block_tokens=spec.block_size, tenant_tag=tenants.offline)
    mark = time.monotonic()
    summary, replay = await replay_once(generate(workload), target, options, None, progress=progress)
    result.phases_s["offline"] = time.monotonic() - mark
    result.offline_summary = summary
    result.offline = run_figures(summary)
    result.offline["turn_phases"] = phases.breakdown(summary, replay.turns, result.offline["snic"])
    result.turn_records = replay.turns
    _log(
        f"{result.policy.name} offline: JCT {summary['duration_s']:.1f} s, {summary['turns_ok']}/"
        f"{summary['turns_total']} turns, TPOT p90 {summary['tpot_p90_ms'] or 0:.1f} ms"
    )


async def _capacity(
    policy: Policy,
    target: Target,
    workload: AgentWorkloadSpec,
    online: OnlineSpec,
    spec: cluster.ClusterSpec,
    tenant_tag: str,
    progress: bool,
) -> dict[str, Any]:
    agents = online.workload(workload)
    # One tenant for the whole search: the online agents' shared prefix is computed once (by
    # `warm_prefixes`: a 30K-token prefill, ~1.5 local minutes at D = 10) and every probe finds it
    # in the store, as a deployment would; each probe's agents are its own (their own labels, so
    # their own tokens), so no probe hits another's sessions.
    probes: list[dict] = []

    async def probe(rate: float) -> bool:
        options = ReplayOptions(
            rate=rate, duration_s=online.duration_s, kv_block_tokens=spec.block_size, tenant_tag=tenant_tag
        )
        label = f"probe{len(probes)}-agent"
        summary, _ = await replay_once(generate(agents, label), target, options, online.slo, progress=progress)
        entry = cap.probe_entry(rate, summary)
        entry["agents_started"] = summary["run"]["jobs_started"]
        probes.append(entry)
        _log(
            f"{policy.name} online {rate:.3g} agents/s: {entry['attainment']:.1%} of {entry['turns_total']} turns "
            f"meet the SLO -> {'pass' if entry['meets_slo'] else 'fail'}"
        )
        return bool(entry["meets_slo"])

    found = await cap.search(probe, online.search_spec())
    return {
        "capacity_agents_per_s": found.capacity,
        "lowest_failing_agents_per_s": found.lowest_failing,
        "converged": found.converged,
        "probes": probes,
    }
