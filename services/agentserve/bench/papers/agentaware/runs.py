"""Runs of `bench agentaware`: for each lifecycle policy one cluster (started with
`bench dualpath`'s harness, the policy chosen by the scheduler's `kv_lifecycle`), and on it the
workload once per arrival rate, each run a tenant of its own so no run hits another's cache."""

from __future__ import annotations

import asyncio
import sys
import time
import uuid
from dataclasses import dataclass, field
from typing import Any

from agentserve.bench.common import cluster
from agentserve.bench.common.policy import Policy
from agentserve.bench.common.target import Target
from agentserve.bench.common.workloads.model import Workload
from agentserve.bench.papers.agentaware.bound import ServiceModel
from agentserve.bench.papers.agentaware.metrics import run_figures
from agentserve.bench.papers.replay.client import SDKClient
from agentserve.bench.papers.replay.prom import PromSampler
from agentserve.bench.papers.replay.replayer import Replayer, ReplayOptions

SAMPLE_INTERVAL_S = 1.0  # pool occupancy samples: fine enough to see a tool wait's offload


@dataclass(frozen=True)
class RunSpec:
    """What every policy's runs share: the workload, the arrival rates it is replayed at, and how
    a run's records become figures."""

    workload: Workload
    rates: tuple[float, ...]  # jobs per local second, one run each
    speedup: float  # the replay's speedup of the workload's recorded times: 1 / time dilation
    block_bytes: int  # the target's bytes per KV block
    seed: int
    service: ServiceModel  # a turn's modelled compute, for the job latency bound


@dataclass
class PolicyRuns:
    policy: Policy
    by_rate: dict[float, dict[str, Any]] = field(default_factory=dict)
    unavailable: list[str] = field(default_factory=list)
    wall_s: float = 0.0

    def to_json(self) -> dict[str, Any]:
        """The policy's entry under the bench JSON's `policies`: its runs keyed by rate as text."""
        return {
            "settings": self.policy.to_dict(),
            "unavailable": self.unavailable or None,
            "wall_s": round(self.wall_s, 1),
            "runs": {str(rate): figures for rate, figures in self.by_rate.items()},
        }


def _log(text: str) -> None:
    print(f"agentserve bench agentaware: {text}", file=sys.stderr, flush=True)


async def run_rate(run: RunSpec, target: Target, rate: float, block_tokens: int) -> dict[str, Any]:
    options = ReplayOptions(
        speedup=run.speedup,
        rate=rate,
        kv_block_tokens=block_tokens,
        seed=run.seed,
        tenant_tag=f"-{uuid.uuid4().hex[:8]}",
    )
    client = SDKClient(target.address, target.toolproxy_url)
    watched = {n: url for n, url in target.metrics.items() if n == "scheduler" or n.startswith("decode")}
    sampler = PromSampler(watched, interval_s=SAMPLE_INTERVAL_S)
    try:
        replayer = Replayer(run.workload, client, options)
        await replayer.warm_prefixes()
        await sampler.scrape_once()
        sampling = asyncio.create_task(sampler.run())
        try:
            result = await replayer.run()
        finally:
            await sampler.stop()
            await sampling
    finally:
        await client.close()
    figures = run_figures(
        run.workload,
        result.turns,
        result.sessions,
        sampler.scrapes,
        result.started_unix_s,
        result.duration_s,
        block_tokens,
        run.block_bytes,
        run.service,
    )
    figures["rate_jobs_per_s"] = rate
    figures["jobs_started"] = result.jobs_started
    return figures


async def run_policy(policy: Policy, spec: cluster.ClusterSpec, run: RunSpec) -> PolicyRuns:
    started = time.monotonic()
    runs = PolicyRuns(policy)
    target = await cluster.start(spec, policy, bench="agentaware")
    try:
        for rate in run.rates:
            figures = await run_rate(run, target, rate, spec.block_size)
            runs.by_rate[rate] = figures
            _log(
                f"{policy.name} at {rate:g} jobs/s: mean job latency {figures['job_latency_mean_s'] or 0:.1f} s, "
                f"{figures['jobs_done']} jobs, {figures['turns_failed']} turns failed, "
                f"{figures['turn_retries']} retried after 429, prefetch hits "
                f"{figures['resident_at_first_token']}/{figures['returning_turns']} "
                f"({figures['resident_on_another_engine']}/{figures['returning_turns_on_another_engine']} moved), "
                f"offloaded {figures['offload_blocks']} uploaded {figures['upload_blocks']} blocks, "
                f"bound {figures['bound']['job_latency_bound_mean_s'] or 0:.1f} s"
            )
    finally:
        await target.close()
    runs.wall_s = time.monotonic() - started
    return runs
