"""`agentserve bench dualpath`: every policy on the same agent workload, one invocation.

Each policy runs on a fresh cluster of its own (same engines, profile, block size and compute), so
no policy hits another's cache. By default every cluster starts, one at a time, and then all the
policies are served at the same time:
at time dilation 10 a policy's offline run is bound by its agents' 30-turn chains of modelled time
(~5 s local a later turn, ~170 s an agent even on free CPUs), not by the CPU, so one after another
they alone take longer than the 20-minute budget, while side by side they share the machine's
background load alike. The CPU floor runs after them, alone: it serves the workload as fast as the
CPUs allow, so beside them it would take the cores their modelled I/O and compute need.
`concurrent=False` runs them one after another (a quiet machine, the sweep).
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

from agentserve.bench.common.cluster import ClusterSpec
from agentserve.bench.common.policy import Policy, unsupported
from agentserve.bench.common.target import Target
from agentserve.bench.papers.dualpath import limits, ratios, regime
from agentserve.bench.papers.dualpath.policies import POLICY_NAMES, policies
from agentserve.bench.papers.dualpath.runs import OnlineSpec, PolicyResult, Tenants, run_policy, start, warm_prefixes
from agentserve.bench.papers.dualpath.workload import AgentWorkloadSpec, generate, shape

ONLINE_POLICIES = ("baseline", "dualpath")
# Capacity searches run on a cluster of their own when the policies run at once: the baseline's.
# Its offline run is the longest (the same work over one path, loads before compute), so a search
# on the same cluster would start only after it and push the invocation past its 20 minutes. Its
# second cluster starts and warms with the others and begins its search once any other cluster's
# runs have ended, so no more clusters serve at once than there are policies; it still measures
# the baseline's capacity on a cluster of its own.
ONLINE_APART = ("baseline",)


@dataclass(frozen=True)
class RunKey:
    """Which cluster a run is on: `policy`'s own, or (`search_apart`) the second cluster its
    capacity search runs on alone."""

    policy: str
    search_apart: bool = False


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
    concurrent: bool = True  # every policy's cluster at once (then the floor's); False: one after another
    # The regime the workload's later turns put the cluster in, in target terms (`regime.modelled`);
    # None: not modelled (real compute).
    storage_modelled: dict[str, Any] | None = None

    def __post_init__(self) -> None:
        unknown = [p for p in self.policies if p not in POLICY_NAMES]
        if unknown:
            raise ValueError(f"unknown policies {unknown}; choose from {', '.join(POLICY_NAMES)}")


@dataclass(frozen=True)
class _Run:
    """One cluster's work: a policy's runs, or the CPU floor's (offline only)."""

    policy: Policy
    cluster: ClusterSpec
    online: OnlineSpec | None = None
    offline: bool = True  # False: the capacity search alone, once another cluster's runs have ended


async def run_bench(spec: BenchSpec, progress: bool = False) -> dict[str, Any]:
    started = time.monotonic()
    started_unix = time.time()
    load_before = os.getloadavg()[0]
    catalogue = policies()
    results: dict[str, PolicyResult] = {}
    runs: dict[RunKey, _Run] = {}
    for name in spec.policies:
        policy = catalogue[name]
        problems = unsupported(policy)
        if problems:
            results[name] = PolicyResult(policy, unavailable=problems)
            continue
        online = spec.online if name in ONLINE_POLICIES else None
        if online is not None and spec.concurrent and name in ONLINE_APART:
            runs[RunKey(name)] = _Run(policy, spec.cluster)
            runs[RunKey(name, search_apart=True)] = _Run(policy, spec.cluster, online, offline=False)
        else:
            runs[RunKey(name)] = _Run(policy, spec.cluster, online)
    floor, floor_problems = _floor_run(spec, catalogue)
    results.update(_merge_apart(await _run_all(runs, spec, progress)))
    floor_result = None
    if floor is not None:
        floor_result = await run_policy(floor.policy, floor.cluster, spec.workload, None, progress)
    floor_json = _floor_json(spec, floor_result, floor_problems)
    offline = {n: r.offline for n, r in results.items()}
    capacity = {n: (r.capacity or {}).get("capacity_agents_per_s") for n, r in results.items()}
    probes = {n: (r.capacity or {}).get("probes") or [] for n, r in results.items()}
    figures = ratios.must_show(offline, capacity, probes)
    verdicts = ratios.verdicts(figures)
    return {
        **figures,
        "targets": verdicts,
        "tpot_at_equal_load": ratios.equal_load_tpot(probes),
        # Whether the run was in DualPath's regime: storage-NIC bound on the prefill side.
        "storage_regime": {
            "modelled": spec.storage_modelled,
            "measured": regime.measured(limits.storage_sides(results)),
        },
        "limits": limits.explain(verdicts, results, floor_json, spec),
        "regime": {
            **spec.regime,
            "cluster": spec.cluster.to_dict(),
            "workload": spec.workload.to_dict(),
            "workload_shape": shape(generate(spec.workload)).to_dict(),
            "online": None if spec.online is None else spec.online.to_json(spec.workload),
            "policies_run": _how_run(spec, runs),
        },
        "policies": {n: r.to_json() for n, r in results.items()},
        "cpu_floor": floor_json,
        "wall_s": time.monotonic() - started,
        # When the run began and ended on the wall clock, to place it inside the command's own time.
        "wall_clock": {"start_unix": started_unix, "end_unix": time.time()},
        # The machine may be shared: its 1-minute load before and after says how much.
        "machine": {"cpus": os.cpu_count(), "load_avg_1m_start": load_before, "load_avg_1m_end": os.getloadavg()[0]},
    }


async def _run_all(runs: dict[RunKey, _Run], spec: BenchSpec, progress: bool) -> dict[RunKey, PolicyResult]:
    """Every run, one after another, or (`spec.concurrent`) on clusters started one at a time (a
    start is CPU-bound: a dozen processes importing torch; several at once on two cores only
    take longer, each), each cluster's shared prefixes computed while the next ones start (that
    is modelled compute, asleep), and then every run served at once, from the same moment. A
    failure stops every cluster."""

    freed = asyncio.Event()  # some cluster's runs have ended: a search apart may begin

    def run(
        key: RunKey, started: tuple[Target, float] | None = None, tenants: Tenants | None = None
    ) -> Coroutine[Any, Any, PolicyResult]:
        r = runs[key]
        before_online = None if r.offline else freed.wait
        return run_policy(
            r.policy, r.cluster, spec.workload, r.online, progress, started, tenants, r.offline, before_online
        )

    if not spec.concurrent:
        return {key: await run(key) for key in runs}
    clusters: dict[RunKey, tuple[Target, float]] = {}
    tenants = {key: Tenants.new() for key in runs}
    warming: dict[RunKey, asyncio.Task[float]] = {}
    try:
        for key, r in runs.items():
            clusters[key] = await start(r.policy, r.cluster)
            target = clusters[key][0]
            warming[key] = asyncio.create_task(
                warm_prefixes(target, spec.workload, r.online, r.cluster.block_size, tenants[key], r.offline)
            )
        warm_s = dict(zip(warming, await asyncio.gather(*warming.values())))
    except BaseException:
        for task in warming.values():
            task.cancel()
        await asyncio.gather(*warming.values(), return_exceptions=True)
        await asyncio.gather(*(target.close() for target, _ in clusters.values()), return_exceptions=True)
        raise
    async with asyncio.TaskGroup() as group:
        tasks = {key: group.create_task(run(key, started, tenants[key])) for key, started in clusters.items()}
        for key, running in tasks.items():
            if runs[key].offline:
                running.add_done_callback(lambda _: freed.set())
    results = {key: t.result() for key, t in tasks.items()}
    for key, result in results.items():
        result.phases_s["warm"] = warm_s[key]  # beside the later starts, not after this one
    return results


def _how_run(spec: BenchSpec, runs: dict[RunKey, _Run]) -> str:
    if not spec.concurrent:
        return "one after another, each on its own cluster"
    apart = [key.policy for key in runs if key.search_apart]
    searches = "".join(
        f"; {name}'s capacity search on a second cluster of its own, started and warmed with the others, "
        "searching from the moment another cluster's runs had ended"
        for name in apart
    )
    return f"at once, each on its own cluster{searches}; the CPU floor's after them, alone"


def _merge_apart(results: dict[RunKey, PolicyResult]) -> dict[str, PolicyResult]:
    """Each policy's result by name, a search run apart folded into it: its capacity, and its
    cluster's phases as `online_*` (start, warm, the wait for a free slot, the search, stop)."""
    merged = {key.policy: r for key, r in results.items() if not key.search_apart}
    for key, apart in results.items():
        if key.search_apart:
            policy = merged[key.policy]
            policy.capacity = apart.capacity
            policy.phases_s.update(
                {("online" if phase == "online" else f"online_{phase}"): s for phase, s in apart.phases_s.items()}
            )
    return merged


def _floor_run(spec: BenchSpec, catalogue: dict[str, Policy]) -> tuple[_Run | None, list[str]]:
    """The dualpath policy's offline run with free compute on an unshaped fabric: the time the
    emulation itself (processes, gRPC, Python) takes for this workload. (None, why) when this
    build cannot run it; (None, []) when not asked for."""
    if spec.floor_settings is None:
        return None, []
    policy = replace(catalogue["dualpath"], name="dualpath CPU floor")
    problems = unsupported(policy)
    if problems:
        return None, problems
    # The floor's settings are the engines' emulation's (every engine's time dilation).
    compute = spec.cluster.compute
    floor = replace(compute, emulation=replace(compute.emulation, **spec.floor_settings))
    return _Run(policy, replace(spec.cluster, profile="local-unshaped", compute=floor)), []


def _floor_json(spec: BenchSpec, result: PolicyResult | None, problems: list[str]) -> dict[str, Any] | None:
    if spec.floor_settings is None:
        return None
    if result is None:
        return {"jct_s": None, "unavailable": problems}
    offline = result.offline or {}
    return {
        "jct_s": offline.get("jct_s"),
        **result.timing_json(),
        "turns_ok": offline.get("turns_ok"),
        "turns_total": offline.get("turns_total"),
        "settings": {"profile": "local-unshaped", **spec.floor_settings},
    }
