"""One measured replay against a target: warm shared prefixes, sample the services' metrics,
replay, collect KV spans, summarize."""

from __future__ import annotations

import asyncio
import sys
import time
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from agentserve.bench.common.spans import OtlpSink
from agentserve.bench.common.target import Target
from agentserve.bench.common.workloads import load_workload
from agentserve.bench.common.workloads.model import Workload, scaled, subset
from agentserve.bench.papers.replay.cli_args import DEFAULT_TOKEN_SCALE
from agentserve.bench.papers.replay.client import SDKClient
from agentserve.bench.papers.replay.prom import PromSampler
from agentserve.bench.papers.replay.records import TurnRecord
from agentserve.bench.papers.replay.replayer import Replayer, ReplayOptions, ReplayResult
from agentserve.bench.papers.replay.service_metrics import kv_bytes, nic_utilization, phase_seconds, tier_hits
from agentserve.bench.papers.replay.slo import SLO
from agentserve.bench.papers.replay.summary import summarize

KV_BLOCK_TOKENS = 16


@dataclass(frozen=True)
class WorkloadSpec:
    path: Path
    fmt: str = "auto"
    token_scale: int | None = None  # None: DEFAULT_TOKEN_SCALE for recorded traces, 1 for the rest
    max_sessions: int | None = None
    arrival_before_s: float | None = None  # recorded seconds
    reuse: str = "recorded"
    chain: bool = True


def default_token_scale(workload: Workload) -> int:
    """Recorded production traces are scaled down to run on CPUs; generated workloads are not."""
    return DEFAULT_TOKEN_SCALE if workload.source.startswith(("mooncake:", "tracelab:")) else 1


def prepare_workload(spec: WorkloadSpec) -> tuple[Workload, int]:
    """The subset to replay, scaled; and the token scale used."""
    limit = spec.max_sessions if spec.arrival_before_s is None else None
    workload = load_workload(spec.path, spec.fmt, limit=limit, reuse=spec.reuse, chain=spec.chain)
    workload = subset(workload, spec.max_sessions, spec.arrival_before_s)
    if not workload.sessions:
        raise ValueError("the workload subset is empty (check --max-sessions / --duration)")
    scale = spec.token_scale or default_token_scale(workload)
    workload = scaled(workload, scale)
    if workload.hash_block_tokens % KV_BLOCK_TOKENS:
        print(
            f"agentserve bench: warning: hash blocks of {workload.hash_block_tokens} tokens after "
            f"--token-scale {scale} do not align with {KV_BLOCK_TOKENS}-token KV blocks",
            file=sys.stderr,
        )
    return workload, scale


def _progress(total: int, enabled: bool) -> Any:
    from tqdm import tqdm

    return tqdm(
        total=total, unit="turn", disable=not enabled, file=sys.stderr, dynamic_ncols=True, desc="replay", leave=False
    )


async def _settled_transfers(target: Target, start: float, end: float) -> list | None:
    """The run's kv.transfer spans, once exporters have flushed (spans trail by a batch delay)."""
    if target.spans is None:
        return None
    if isinstance(target.spans, OtlpSink):
        seen, quiet_since, deadline = -1, time.monotonic(), time.monotonic() + 10
        while time.monotonic() < deadline and time.monotonic() - quiet_since < 1.5:
            if len(target.spans.transfers) != seen:
                seen, quiet_since = len(target.spans.transfers), time.monotonic()
            await asyncio.sleep(0.25)
        return target.spans.between(start, end)
    await asyncio.sleep(6)  # Phoenix: the services' default batch delay is 5 s
    return await asyncio.to_thread(target.spans.between, start, end)


async def warm(workload: Workload, target: Target, options: ReplayOptions) -> dict[str, int]:
    """Compute `workload`'s shared prefixes on `target` under `options.tenant_tag`, untimed: a
    replay with the same tag later finds them cached (its own warm-up is then a store read)."""
    client = SDKClient(target.address, target.toolproxy_url)
    try:
        return await Replayer(workload, client, options).warm_prefixes()
    finally:
        await client.close()


async def replay_once(
    workload: Workload, target: Target, options: ReplayOptions, slo: SLO | None, progress: bool = False
) -> tuple[dict, ReplayResult]:
    """Replay `workload` once; returns the summary and the raw records."""
    if not options.tenant_tag:
        # A tenant of its own: this run's cache hits come from this run only.
        options = ReplayOptions(**{**options.__dict__, "tenant_tag": f"-{uuid.uuid4().hex[:8]}"})
    client = SDKClient(target.address, target.toolproxy_url)
    bar = _progress(workload.num_turns, progress)
    failed = 0

    def on_turn(record: TurnRecord) -> None:
        nonlocal failed
        failed += not record.ok
        bar.update(1)
        if failed:
            bar.set_postfix(failed=failed, refresh=False)

    try:
        replayer = Replayer(workload, client, options, on_turn=on_turn)
        await replayer.warm_prefixes()
        sampler = PromSampler(target.metrics)
        sampling = asyncio.create_task(sampler.run())
        try:
            result = await replayer.run()
        finally:
            await sampler.stop()
            await sampling
    finally:
        bar.close()
        await client.close()
    end = result.started_unix_s + result.duration_s
    transfers = await _settled_transfers(target, result.started_unix_s, end + 1.0)
    summary = summarize(result.turns, result.sessions, result.duration_s, slo)
    bin_s = max(1.0, round(result.duration_s / 60))
    kv = kv_bytes(sampler.scrapes, transfers, result.started_unix_s, bin_s)
    tiers = tier_hits(sampler.scrapes, summary["prompt_tokens"], summary["cached_tokens"], KV_BLOCK_TOKENS)
    summary.update(
        {
            "kv_bytes_by_path": kv["by_path"],
            "kv_bytes": {"source": kv["source"], "reason": kv["reason"], "timeline": kv["timeline"]},
            "hit_ratio_by_tier": tiers["by_tier"],
            "hit_ratio_by_tier_note": tiers.get("note") or tiers.get("reason"),
            "nic_utilization": nic_utilization(sampler.scrapes),
            "service_seconds": phase_seconds(sampler.scrapes),
            "metrics_unreachable": sorted(sampler.unreachable),
            "run": {
                "load_model": options.load_model,
                "speedup": options.speedup,
                "rate": options.rate,
                "concurrency": options.concurrency,
                "duration_limit_s": options.duration_s,
                "jobs_started": result.jobs_started,
                "jobs_total": result.jobs_total,
                "tenant_tag": options.tenant_tag,
                "warmed_prefixes": result.warmup_prefixes,
                "target": target.description,
            },
        }
    )
    return summary, result
