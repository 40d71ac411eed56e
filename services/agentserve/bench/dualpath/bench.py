"""`agentserve bench dualpath`: every policy on the same agent workload, one invocation.

Each policy runs on a fresh cluster of its own (same engines, profile, block size and compute), so
no policy hits another's cache. By default the policies (and the CPU floor) run at the same time:
at time dilation 10 a policy's offline run is bound by its agents' 30-turn chains of modelled time
(~5 s local a later turn, ~170 s an agent even on free CPUs), not by the CPU, so one after another
they alone took longer than the 20-minute budget, while side by side they share the machine's
background load alike. `concurrent=False` runs them one after another (a quiet machine, the sweep).
The result states its regime (profile, time dilation, scale, budgets, how the policies were run)
beside the figures, and what limits any figure that misses its target, measured in the same run.
"""

from __future__ import annotations

import asyncio
import os
import time
from collections.abc import Coroutine
from dataclasses import dataclass, field, replace
from typing import Any

from agentserve.bench.dualpath import limits, ratios
from agentserve.bench.dualpath.cluster import ClusterSpec
from agentserve.bench.dualpath.policies import POLICY_NAMES, Policy, policies, unsupported
from agentserve.bench.dualpath.runs import OnlineSpec, PolicyResult, run_policy
from agentserve.bench.dualpath.workload import AgentWorkloadSpec, generate, shape

ONLINE_POLICIES = ("baseline", "dualpath")


@dataclass(frozen=True)
class BenchSpec:
    workload: AgentWorkloadSpec = AgentWorkloadSpec()
    cluster: ClusterSpec = ClusterSpec()
    online: OnlineSpec | None = None  # None: no capacity search
    policies: tuple[str, ...] = POLICY_NAMES
    # Settings that make engine compute free (and the profile unshaped): the run then measures
    # what the processes themselves cost. None: no floor run.
    floor_settings: dict[str, Any] | None = None
    regime: dict[str, Any] = field(default_factory=dict)  # compute mode, time dilation, SLO in target terms
    concurrent: bool = True  # every policy's cluster (and the floor's) at once; False: one after another

    def __post_init__(self) -> None:
        unknown = [p for p in self.policies if p not in POLICY_NAMES]
        if unknown:
            raise ValueError(f"unknown policies {unknown}; choose from {', '.join(POLICY_NAMES)}")


async def run_bench(spec: BenchSpec, progress: bool = False) -> dict[str, Any]:
    started = time.monotonic()
    load_before = os.getloadavg()[0]
    catalogue = policies()
    results: dict[str, PolicyResult] = {}
    runs: dict[str, Coroutine[Any, Any, PolicyResult]] = {}
    for name in spec.policies:
        policy = catalogue[name]
        problems = unsupported(policy)
        if problems:
            results[name] = PolicyResult(policy, unavailable=problems)
            continue
        online = spec.online if name in ONLINE_POLICIES else None
        runs[name] = run_policy(policy, spec.cluster, spec.workload, online, progress)
    floor_run = _floor(spec, catalogue, progress) if spec.floor_settings is not None else None
    done, floor = await _run_all(runs, floor_run, spec.concurrent)
    results.update(done)
    offline = {n: r.offline for n, r in results.items()}
    capacity = {n: (r.capacity or {}).get("capacity_agents_per_s") for n, r in results.items()}
    figures = ratios.must_show(offline, capacity)
    verdicts = ratios.verdicts(figures)
    return {
        **figures,
        "targets": verdicts,
        "limits": limits.explain(verdicts, results, floor, spec),
        "regime": {
            **spec.regime,
            "cluster": spec.cluster.to_dict(),
            "workload": spec.workload.to_dict(),
            "workload_shape": shape(generate(spec.workload)).to_dict(),
            "online": None
            if spec.online is None
            else {
                "slo_local": str(spec.online.slo),
                "duration_s": spec.online.duration_s,
                "start_agents_per_s": spec.online.start_rate,
                "max_agents_per_s": spec.online.max_rate,
                "max_probes": spec.online.max_probes,
                "turns_per_agent": spec.online.turns or spec.workload.turns,
                "tolerance": spec.online.tolerance,
                "agents_available": spec.online.agents_needed,
                "workload": spec.online.workload(spec.workload).to_dict(),
                "workload_shape": shape(generate(spec.online.workload(spec.workload))).to_dict(),
            },
            "policies_run": "at once, each on its own cluster (the CPU floor's beside them)"
            if spec.concurrent
            else "one after another, each on its own cluster",
        },
        "policies": {n: _policy_json(r) for n, r in results.items()},
        "cpu_floor": floor,
        "wall_s": time.monotonic() - started,
        # The machine may be shared: its 1-minute load before and after says how much.
        "machine": {"cpus": os.cpu_count(), "load_avg_1m_start": load_before, "load_avg_1m_end": os.getloadavg()[0]},
    }


async def _run_all(
    runs: dict[str, Coroutine[Any, Any, PolicyResult]],
    floor: Coroutine[Any, Any, dict[str, Any]] | None,
    concurrent: bool,
) -> tuple[dict[str, PolicyResult], dict[str, Any] | None]:
    """Every policy's run and the floor's, at once or in order; a failure cancels the rest."""
    if not concurrent:
        results = {name: await run for name, run in runs.items()}
        return results, (await floor if floor is not None else None)
    async with asyncio.TaskGroup() as group:
        tasks = {name: group.create_task(run) for name, run in runs.items()}
        floor_task = group.create_task(floor) if floor is not None else None
    return {name: t.result() for name, t in tasks.items()}, (floor_task.result() if floor_task else None)


async def _floor(spec: BenchSpec, catalogue: dict[str, Policy], progress: bool) -> dict[str, Any]:
    """The dualpath policy's offline run with free compute on an unshaped fabric: the time the
    emulation itself (processes, gRPC, Python) takes for this workload."""
    settings = spec.floor_settings or {}
    policy = replace(catalogue["dualpath"], name="dualpath CPU floor")
    for role in ("prefill", "decode"):
        policy = policy.with_settings(role, settings)
    problems = unsupported(policy)
    if problems:
        return {"jct_s": None, "unavailable": problems}
    floor_cluster = replace(spec.cluster, profile="local-unshaped")
    result = await run_policy(policy, floor_cluster, spec.workload, None, progress)
    offline = result.offline or {}
    return {
        "jct_s": offline.get("jct_s"),
        "wall_s": round(result.wall_s, 1),
        "turns_ok": offline.get("turns_ok"),
        "turns_total": offline.get("turns_total"),
        "settings": {"profile": "local-unshaped", **settings},
    }


def _policy_json(r: PolicyResult) -> dict[str, Any]:
    return {
        "settings": r.policy.to_dict(),
        "unavailable": r.unavailable or None,
        "offline": r.offline,
        "capacity": r.capacity,
        "wall_s": round(r.wall_s, 1),
        "phases_s": {phase: round(s, 1) for phase, s in r.phases_s.items()},
    }
