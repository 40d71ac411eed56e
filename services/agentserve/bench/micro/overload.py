"""`agentserve bench overload`: what the scheduler's load bounds do at several times the sustainable rate.

Regime: a fresh local cluster (1 prefill, 1 decode, the tiny default model on CPU) whose scheduler
admits at most `concurrency` turns in flight (`AGENTSERVE_MAX_INFLIGHT_TURNS`), stateless
`/v1/completions` of `prompt_tokens` random token ids and exactly `max_tokens` output tokens.

1. Unloaded: `unloaded_requests` requests one after another; their p50/p99 latency.
2. Sustainable: a closed loop of `concurrency` clients for `window_s`; completions per second is the
   rate the cluster sustains at that concurrency.
3. Overload: an open loop at `multiple` x the sustainable rate for `window_s`, each request on its
   own schedule whatever the others do. Reported: offered and admitted rates, 429s and whether each
   carried Retry-After, admitted p50/p99 against the unloaded p99 (one request at a time) and the
   p99 at the sustainable rate (`concurrency` in flight), and the scheduler's and the store's
   resident memory (VmRSS) before and at its peak, sampled every 0.2 s.

`schedulers` (`--schedulers 1,2`) runs the whole measurement once per count, each on a fresh cluster
with the same engines: one scheduler as `up --local` runs it (sessions in SQLite, no balancer), or
several over etcd behind HAProxy (`up --local --schedulers N`), requests through the balancer's
port. The in-flight bound is the cluster's: each of N schedulers admits `ceil(concurrency / N)`, so
the engines see the same load and the side-by-side reading (admitted throughput, admitted p99) is
the control plane's cost. The requests are stateless completions: etcd carries the engines'
heartbeats, not sessions.
"""

from __future__ import annotations

import asyncio
import json
import math
import random
import sys
import tempfile
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

import aiohttp

from agentserve.bench.common.stats import percentile


@dataclass
class Outcome:
    status: int
    latency_s: float
    retry_after: str | None


@dataclass
class Phase:
    requests: int = 0
    ok: int = 0
    refused: int = 0  # 429
    other: dict[str, int] = field(default_factory=dict)  # any other status -> count
    refused_with_retry_after: int = 0
    ok_p50_s: float = 0.0
    ok_p99_s: float = 0.0
    wall_s: float = 0.0

    @classmethod
    def of(cls, outcomes: list[Outcome], wall_s: float) -> Phase:
        ok = sorted(o.latency_s for o in outcomes if o.status == 200)
        other: dict[str, int] = {}
        for o in outcomes:
            if o.status not in (200, 429):
                other[str(o.status)] = other.get(str(o.status), 0) + 1
        refused = [o for o in outcomes if o.status == 429]
        return cls(
            requests=len(outcomes),
            ok=len(ok),
            refused=len(refused),
            other=other,
            refused_with_retry_after=sum(1 for o in refused if o.retry_after),
            ok_p50_s=_percentile_or_zero(ok, 50),
            ok_p99_s=_percentile_or_zero(ok, 99),
            wall_s=wall_s,
        )


def _ratio(a: float, b: float) -> float | None:
    return round(a / b, 2) if b else None


def _percentile_or_zero(values: list[float], p: float) -> float:
    """The `p`-th percentile of `values` (bench.common.stats), 0.0 for a phase with none."""
    value = percentile(values, p)
    return 0.0 if value is None else value


class MemorySampler:
    """Peak VmRSS (MB) of some processes, sampled in the background."""

    def __init__(self, pids: dict[str, int]) -> None:
        self.pids = pids
        self.first = {name: rss_mb(pid) for name, pid in pids.items()}
        self.peak = dict(self.first)

    async def run(self, interval_s: float = 0.2) -> None:
        while True:
            for name, pid in self.pids.items():
                self.peak[name] = max(self.peak[name], rss_mb(pid))
            await asyncio.sleep(interval_s)


def rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return 0.0


async def _request(http: aiohttp.ClientSession, url: str, body: bytes) -> Outcome:
    started = time.perf_counter()
    async with http.post(url, data=body, headers={"Content-Type": "application/json"}) as resp:
        await resp.read()
        return Outcome(resp.status, time.perf_counter() - started, resp.headers.get("Retry-After"))


async def measure(
    url: str,
    pids: dict[str, int],
    concurrency: int,
    multiple: float,
    window_s: float,
    unloaded_requests: int,
    prompt_tokens: int,
    max_tokens: int,
) -> dict:
    rng = random.Random(0)

    def body() -> bytes:
        prompt = [rng.randrange(5, 8000) for _ in range(prompt_tokens)]
        return json.dumps({"prompt": prompt, "max_tokens": max_tokens, "ignore_eos": True, "temperature": 0}).encode()

    timeout = aiohttp.ClientTimeout(total=600)
    connector = aiohttp.TCPConnector(limit=0)
    async with aiohttp.ClientSession(timeout=timeout, connector=connector) as http:
        started = time.perf_counter()
        unloaded = [await _request(http, url, body()) for _ in range(unloaded_requests)]
        unloaded_phase = Phase.of(unloaded, time.perf_counter() - started)

        closed: list[Outcome] = []
        deadline = time.perf_counter() + window_s

        async def client() -> None:
            while time.perf_counter() < deadline:
                closed.append(await _request(http, url, body()))

        started = time.perf_counter()
        await asyncio.gather(*(client() for _ in range(concurrency)))
        closed_phase = Phase.of(closed, time.perf_counter() - started)
        sustainable = closed_phase.ok / closed_phase.wall_s

        rate = multiple * sustainable
        sampler = MemorySampler(pids)
        sampling = asyncio.create_task(sampler.run())
        started = time.perf_counter()
        tasks = []
        for i in range(int(rate * window_s)):
            delay = started + i / rate - time.perf_counter()
            if delay > 0:
                await asyncio.sleep(delay)
            tasks.append(asyncio.create_task(_request(http, url, body())))
        offered_s = time.perf_counter() - started
        overload = await asyncio.gather(*tasks)
        overload_phase = Phase.of(list(overload), time.perf_counter() - started)
        sampling.cancel()
    return {
        "regime": {
            "concurrency_bound": concurrency,
            "multiple": multiple,
            "window_s": window_s,
            "prompt_tokens": prompt_tokens,
            "max_tokens": max_tokens,
        },
        "unloaded": asdict(unloaded_phase),
        "sustainable": {**asdict(closed_phase), "rate_per_s": round(sustainable, 2)},
        "overload": {
            **asdict(overload_phase),
            "offered_per_s": round(len(tasks) / offered_s, 2),
            "admitted_per_s": round(overload_phase.ok / overload_phase.wall_s, 2),
            "p99_vs_unloaded_p99": _ratio(overload_phase.ok_p99_s, unloaded_phase.ok_p99_s),
            "p99_vs_sustainable_p99": _ratio(overload_phase.ok_p99_s, closed_phase.ok_p99_s),
        },
        "rss_mb": {
            name: {"before": round(sampler.first[name], 1), "peak": round(sampler.peak[name], 1)} for name in pids
        },
    }


def run(
    concurrency: int = 4,
    multiple: float = 3.0,
    window_s: float = 15.0,
    unloaded_requests: int = 20,
    prompt_tokens: int = 64,
    max_tokens: int = 16,
    schedulers: tuple[int, ...] = (1,),
) -> dict:
    """One measurement per count in `schedulers`; with the single count 1, its result as it is,
    else each count's under `runs` and the two figures side by side."""
    runs = {}
    for count in schedulers:
        runs[str(count)] = _run_one(
            count, concurrency, multiple, window_s, unloaded_requests, prompt_tokens, max_tokens
        )
        report(runs[str(count)])
    if tuple(schedulers) == (1,):
        return runs["1"]
    result = {"runs": runs, "side_by_side": side_by_side(runs)}
    report_side_by_side(result["side_by_side"])
    return result


def _run_one(
    schedulers: int,
    concurrency: int,
    multiple: float,
    window_s: float,
    unloaded_requests: int,
    prompt_tokens: int,
    max_tokens: int,
) -> dict:
    from agentserve.cluster.local import LocalCluster
    from agentserve.cluster.ports import LocalPorts
    from agentserve.cluster.settings import ControlSettings

    work = Path(tempfile.mkdtemp(prefix="agentserve-overload-bench-"))
    bound = str(math.ceil(concurrency / schedulers))  # the cluster's bound, split over its schedulers
    env = {"AGENTSERVE_MAX_INFLIGHT_TURNS": bound, "AGENTSERVE_MAX_INFLIGHT_PER_TENANT": bound}
    cluster = LocalCluster(
        LocalPorts.free(1),
        decoders=1,
        data_dir=work / "kv",
        log_dir=work / "logs",
        env=env,
        control=ControlSettings(schedulers),
    )
    print(
        f"starting a local cluster, {schedulers} scheduler(s) (in flight <= {bound} each; logs in {cluster.log_dir})",
        file=sys.stderr,
    )
    cluster.start()
    try:
        pids = {p.name: p.popen.pid for p in cluster.procs if p.name.startswith(("scheduler", "kvstore"))}
        url = f"http://127.0.0.1:{cluster.ports.http}/v1/completions"
        result = asyncio.run(
            measure(url, pids, concurrency, multiple, window_s, unloaded_requests, prompt_tokens, max_tokens)
        )
    finally:
        cluster.stop()
    result["regime"]["schedulers"] = schedulers
    result["regime"]["bound_per_scheduler"] = int(bound)
    return result


def side_by_side(runs: dict[str, dict]) -> dict[str, dict[str, float | None]]:
    """Per scheduler count: the sustainable rate, and under overload the admitted rate and p99."""
    return {
        count: {
            "sustainable_per_s": r["sustainable"]["rate_per_s"],
            "admitted_per_s": r["overload"]["admitted_per_s"],
            "admitted_p99_s": round(r["overload"]["ok_p99_s"], 4),
            "refused": r["overload"]["refused"],
            "unloaded_p99_s": round(r["unloaded"]["ok_p99_s"], 4),
        }
        for count, r in runs.items()
    }


def report_side_by_side(rows: dict[str, dict[str, float | None]]) -> None:
    print(
        "schedulers | sustainable/s | admitted/s under overload | admitted p99 s | refused | unloaded p99 s",
        file=sys.stderr,
    )
    for count, row in rows.items():
        print(
            f"{count} | {row['sustainable_per_s']} | {row['admitted_per_s']} | {row['admitted_p99_s']} | "
            f"{row['refused']} | {row['unloaded_p99_s']}",
            file=sys.stderr,
        )


def report(result: dict) -> None:
    u, s, o = result["unloaded"], result["sustainable"], result["overload"]
    print(
        f"unloaded: p50 {u['ok_p50_s']:.3f} s, p99 {u['ok_p99_s']:.3f} s ({u['ok']} requests)\n"
        f"sustainable at {result['regime']['concurrency_bound']} in flight: {s['rate_per_s']} requests/s\n"
        f"overload: offered {o['offered_per_s']}/s ({result['regime']['multiple']}x), admitted "
        f"{o['admitted_per_s']}/s; {o['ok']} ok, {o['refused']} refused 429 ({o['refused_with_retry_after']} "
        f"with Retry-After), other {o['other'] or 'none'}; admitted p99 {o['ok_p99_s']:.3f} s = "
        f"{o['p99_vs_unloaded_p99']}x unloaded p99, {o['p99_vs_sustainable_p99']}x p99 at the sustainable rate "
        f"({s['ok_p99_s']:.3f} s)\n"
        + "\n".join(
            f"{name} RSS: {mb['before']} MB before, {mb['peak']} MB peak" for name, mb in result["rss_mb"].items()
        ),
        file=sys.stderr,
    )
