"""`agentserve bench soak`: a running system held at a fraction of its capacity for a while; every
turn must succeed and no service's memory may keep growing.

Regime: agent sessions over the scheduler's gRPC API (the SDK), each `turns_per_session` turns of
`new_tokens` random token ids and exactly `max_tokens` greedy output tokens, then closed, so
histories grow, hit the cache and are released.

1. Capacity: `concurrency` sessions back to back for `capacity_s`: turns completed per second.
2. Soak: sessions started on an open schedule at `fraction` x capacity turns/s for `duration_s`
   (each on its own schedule, whatever the others do).

Memory: VmRSS of the soaked system's service processes (found by their command line,
`-m agentserve.<service>`: the children of `parent`, the `up --local` process, when given; else every
one on this host), sampled every `sample_s`. Growth of a process = the mean of the last
fifth of its samples over the mean of the first fifth, minus one (the first fifth follows the
capacity phase, so caches that fill at first are not counted as growth).

Passes when no turn failed and every process grew less than `max_growth`.
"""

from __future__ import annotations

import asyncio
import random
import re
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from agentserve.bench.common.stats import percentile
from agentserve.bench.micro.overload import rss_mb

if TYPE_CHECKING:
    from agentserve.sdk.aio import AsyncClient

SERVICE_CMDLINE = re.compile(rb"-m\x00agentserve\.(kvstore|scheduler|prefill|decode|toolproxy)\x00")


@dataclass(frozen=True)
class SoakConfig:
    address: str = "127.0.0.1:50051"
    duration_s: float = 1800.0
    fraction: float = 0.7  # of the measured capacity
    rate: float = 0.0  # turns/s; 0 = fraction x the measured capacity
    capacity_s: float = 30.0
    concurrency: int = 4
    turns_per_session: int = 4
    new_tokens: int = 48
    max_tokens: int = 16
    max_growth: float = 0.10
    sample_s: float = 2.0
    api_key: str = ""
    parent: int = 0  # pid of the `up --local` whose children are the services; 0 = every one on the host

    def __post_init__(self) -> None:
        for name in ("duration_s", "capacity_s", "sample_s"):
            if not getattr(self, name) > 0:
                raise ValueError(f"{name} must be positive, got {getattr(self, name)}")
        if not 0 < self.fraction <= 1:
            raise ValueError(f"fraction must be in (0, 1], got {self.fraction}")
        if self.rate < 0:
            raise ValueError(f"rate must be >= 0 (0 = fraction x capacity), got {self.rate}")
        for name in ("concurrency", "turns_per_session", "new_tokens", "max_tokens"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be at least 1, got {getattr(self, name)}")
        if not self.max_growth > 0:
            raise ValueError(f"max_growth must be positive, got {self.max_growth}")


@dataclass
class Turns:
    ok: int = 0
    failed: dict[str, int] = field(default_factory=dict)  # error -> count
    latencies_s: list[float] = field(default_factory=list, repr=False)

    def fail(self, error: BaseException) -> None:
        key = f"{type(error).__name__}: {str(error)[:120]}"
        self.failed[key] = self.failed.get(key, 0) + 1


def service_pids(parent: int = 0) -> dict[str, int]:
    """<service>-<pid> -> pid of the agentserve service processes on this host: `parent`'s children
    only, when given (other clusters on a shared host are not the one soaked)."""
    found: dict[str, int] = {}
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            match = SERVICE_CMDLINE.search((proc / "cmdline").read_bytes())
            # /proc/<pid>/stat: "pid (comm) state ppid ...", comm may hold spaces: split after ")".
            ppid = int((proc / "stat").read_text().rsplit(")", 1)[1].split()[1])
        except (OSError, ValueError, IndexError):
            continue
        if match is not None and (not parent or ppid == parent):
            found[f"{match.group(1).decode()}-{proc.name}"] = int(proc.name)
    return found


class MemoryTrace:
    """Every process's VmRSS (MB) over time; a process that exits keeps the samples it had."""

    def __init__(self, pids: dict[str, int]) -> None:
        self.pids = pids
        self.samples: dict[str, list[float]] = {name: [] for name in pids}

    async def run(self, interval_s: float) -> None:
        while True:
            for name, pid in self.pids.items():
                try:
                    rss = rss_mb(pid)
                except OSError:  # exited
                    continue
                if rss > 0:  # a zombie has no resident set
                    self.samples[name].append(rss)
            await asyncio.sleep(interval_s)

    def growth(self) -> dict[str, dict[str, float]]:
        out = {}
        for name, samples in self.samples.items():
            fifth = max(1, len(samples) // 5)
            if not samples:
                continue
            first, last = sum(samples[:fifth]) / fifth, sum(samples[-fifth:]) / fifth
            out[name] = {
                "first_mb": round(first, 1),
                "last_mb": round(last, 1),
                "peak_mb": round(max(samples), 1),
                "growth": round(last / first - 1, 4),
            }
        return out


async def _session(client: AsyncClient, config: SoakConfig, rng: random.Random, turns: Turns) -> None:
    from agentserve.sdk.errors import AgentServeError

    try:
        async with client.open_session(agent="soak") as session:
            for _ in range(config.turns_per_session):
                ids = [rng.randrange(5, 8000) for _ in range(config.new_tokens)]
                started = time.perf_counter()
                result = await session.turn(token_ids=ids, max_tokens=config.max_tokens, ignore_eos=True).result()
                if len(result.token_ids) != config.max_tokens:
                    raise AgentServeError(f"{len(result.token_ids)} tokens, not {config.max_tokens}")
                turns.latencies_s.append(time.perf_counter() - started)
                turns.ok += 1
    except (AgentServeError, ValueError, OSError) as exc:
        turns.fail(exc)


async def measure(config: SoakConfig) -> dict:
    from agentserve.sdk.aio import AsyncClient

    rng = random.Random(0)
    async with AsyncClient(config.address, timeout_s=120, api_key=config.api_key or None) as client:
        capacity = Turns()
        deadline = time.perf_counter() + config.capacity_s

        async def closed_loop() -> None:
            while time.perf_counter() < deadline:
                await _session(client, config, rng, capacity)

        started = time.perf_counter()
        await asyncio.gather(*(closed_loop() for _ in range(config.concurrency)))
        capacity_per_s = capacity.ok / (time.perf_counter() - started)
        rate = config.rate or config.fraction * capacity_per_s
        if rate <= 0:
            raise RuntimeError(f"no turn completed while measuring capacity: {capacity.failed}")

        memory = MemoryTrace(service_pids(config.parent))
        sampling = asyncio.create_task(memory.run(config.sample_s))
        soak, tasks = Turns(), []
        sessions_per_s = rate / config.turns_per_session
        started = time.perf_counter()
        for i in range(max(1, int(sessions_per_s * config.duration_s))):
            delay = started + i / sessions_per_s - time.perf_counter()
            if delay > 0:
                await asyncio.sleep(delay)
            tasks.append(asyncio.create_task(_session(client, config, rng, soak)))
        await asyncio.gather(*tasks)
        wall_s = time.perf_counter() - started
        sampling.cancel()
    p50, p99 = percentile(soak.latencies_s, 50), percentile(soak.latencies_s, 99)
    growth = memory.growth()
    worst = max((g["growth"] for g in growth.values()), default=0.0)
    return {
        "regime": asdict(config) | {"api_key": "set" if config.api_key else ""},
        "capacity_turns_per_s": round(capacity_per_s, 2),
        "capacity_failed": capacity.failed,
        "offered_turns_per_s": round(rate, 2),
        "turns_ok": soak.ok,
        "turns_failed": soak.failed,
        "wall_s": round(wall_s, 1),
        "turn_p50_s": None if p50 is None else round(p50, 3),
        "turn_p99_s": None if p99 is None else round(p99, 3),
        "memory": growth,
        "worst_growth": worst,
        "passed": not soak.failed and not capacity.failed and worst < config.max_growth and bool(growth),
    }


def report(result: dict) -> str:
    lines = [
        f"capacity {result['capacity_turns_per_s']} turns/s; soak offered {result['offered_turns_per_s']} turns/s "
        f"for {result['wall_s']} s: {result['turns_ok']} ok, failed {result['turns_failed'] or 'none'}; "
        f"turn p50 {result['turn_p50_s']} s, p99 {result['turn_p99_s']} s",
        *(
            f"  {name}: {m['first_mb']} -> {m['last_mb']} MB (peak {m['peak_mb']}), growth {m['growth']:+.1%}"
            for name, m in sorted(result["memory"].items())
        ),
        f"soak {'PASSED' if result['passed'] else 'FAILED'} (worst growth {result['worst_growth']:+.1%}, "
        f"limit {result['regime']['max_growth']:.0%}; failed turns must be 0)",
    ]
    return "\n".join(lines)
