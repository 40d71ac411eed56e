"""`agentserve plan --elastic`: a scaling policy against a static deployment sized for the peak, on a
day of agent sessions with a diurnal arrival rate (`elastic_spec.py` states the day).

- **Static**: the cheapest deployment (`plan/search.py`) that meets the SLO for an hour at the peak
  rate, run for the whole day.
- **Elastic**: starts at the static counts scaled by the day's first rate over the peak, and every
  `interval_s` a controller reads three signals and sizes each role for them (`ScalingPolicy`):
  *queue depth* (prefill compute offered lately, an EWMA of GPU-seconds per second, over
  `prefill_target_util`; and one more engine while the queued compute per prefill engine exceeds
  `backlog_target_s`), *KV pressure* (decode pool blocks that turns in flight hold or will hold,
  sized to `kv_target` of the pools), and *tool waits* (sessions waiting on a tool come back: the
  turns in flight and the waiting sessions together hold, on average, their blocks times the share
  of a session's time spent in flight, from the turns and waits observed so far; the decode count
  covers that or the pressure now, whichever is more, so a ramp of returning sessions is met before
  their turns queue). An added engine takes turns `startup_s` after it was asked for, and its GPU
  counts from the asking. A role whose need stayed below its count for `scale_in_after_s` drains engines: a
  draining engine leaves the scheduler's registry (no new turn is placed on it), finishes the turns
  it holds and is then released. Sessions keep their KV in the store between turns (the simulator's
  regime), so a drained decode engine takes no session's context with it: its sessions' next turns
  load from the store on any engine, and no turn fails (the simulator checks every turn finishes).

Both run on `ElasticCluster` with `MacroDecodeEngine`: a decode batch that does not change steps
many tokens in one event, at the step time of its mid-point contexts (a step's KV read grows
linearly with context, so the mid-point is its mean), which makes a day of decode steps affordable;
a turn that joins cuts the batch's run at the next step boundary, as it would join the next step.
"""

from __future__ import annotations

import math
import random
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any

from agentserve.bench.common.workloads.model import Session, ToolCall, Workload
from agentserve.bench.common.workloads.tracelab import read_tracelab
from agentserve.bench.common.workloads.traces import TRACELAB_ROUNDS, TRACES_DIR
from agentserve.bench.papers.replay.slo import SLO
from agentserve.plan.deployment import Evaluator, Point, Prices
from agentserve.plan.elastic_spec import ElasticSpec
from agentserve.plan.search import Search, Space
from agentserve.plan.workload import PlanWorkload
from agentserve.sim.agents import Agents
from agentserve.sim.cluster import SimCluster
from agentserve.sim.config import SimConfig
from agentserve.sim.decode import DecodeEngine
from agentserve.sim.events import EventLoop
from agentserve.sim.policies import PolicySet, resolve
from agentserve.sim.run import simulate
from agentserve.sim.turn import SimTurn

ENGINE_SNIC_GBPS = 50.0  # one GPU's static share of an 8-GPU node's 400 Gbps storage NIC


# -- the day --
def rate_at(spec: ElasticSpec, t: float) -> float:
    phase = (1 + math.cos(2 * math.pi * (t - spec.peak_at_s) / spec.day_s)) / 2
    return spec.peak_sessions_per_s * (spec.trough + (1 - spec.trough) * phase**spec.sharpness)


def pattern_bound(spec: ElasticSpec, steps: int = 1440) -> float:
    """1 - mean rate / peak rate: the GPU-hours a deployment that followed the load exactly, with no
    start-up and no headroom, would save against one sized for the peak."""
    mean = sum(rate_at(spec, (i + 0.5) * spec.day_s / steps) for i in range(steps)) / steps
    return 1 - mean / spec.peak_sessions_per_s


def arrivals(spec: ElasticSpec, rng: random.Random, rate: Callable[[float], float], span_s: float) -> list[float]:
    """A Poisson process of `rate(t)` sessions/s over [0, span_s), by thinning one at the peak rate."""
    out, t = [], rng.expovariate(spec.peak_sessions_per_s)
    while t < span_s:
        if rng.random() * spec.peak_sessions_per_s < rate(t):
            out.append(t)
        t += rng.expovariate(spec.peak_sessions_per_s)
    return out


def sessions_at(times: list[float], rng: random.Random, name: str) -> PlanWorkload:
    """A session at each time, a copy of one shipped TraceLab session (chosen at random) with its
    tool calls' durations drawn again from every recorded tool latency."""
    templates = read_tracelab(TRACELAB_ROUNDS, reuse="context")
    latencies = [c.duration_s for s in templates.sessions for t in s.turns for c in t.tools]
    sessions = []
    for i, at in enumerate(times):
        template = rng.choice(templates.sessions)
        turns = tuple(
            replace(t, tools=tuple(ToolCall(c.name, rng.choice(latencies), c.start_s) for c in t.tools))
            for t in template.turns
        )
        sessions.append(Session(f"{name}-{i:06d}", turns, arrival_s=at, tenant=name, prefix=template.prefix))
    workload = Workload(name, tuple(sessions), source=f"tracelab:{TRACELAB_ROUNDS.name}", prefixes=templates.prefixes)
    return PlanWorkload(
        workload,
        tuple(times),
        {
            "kind": "tracelab sessions",
            "path": str(TRACELAB_ROUNDS.relative_to(TRACES_DIR.parent)),
            "templates": len(templates.sessions),
        },
    )


def day_workload(spec: ElasticSpec, seed: int) -> PlanWorkload:
    rng = random.Random(seed)
    w = sessions_at(arrivals(spec, rng, lambda t: rate_at(spec, t), spec.day_s), rng, "day")
    return replace(w, source={**w.source, "diurnal": diurnal(spec)})


def peak_workload(spec: ElasticSpec, seed: int, span_s: float = 3600.0) -> PlanWorkload:
    """An hour at the peak rate: what the static deployment is sized for."""
    rng = random.Random(seed + 1_000_003)
    w = sessions_at(arrivals(spec, rng, lambda t: spec.peak_sessions_per_s, span_s), rng, "peak")
    return replace(w, source={**w.source, "rate_sessions_per_s": spec.peak_sessions_per_s, "span_s": span_s})


def diurnal(spec: ElasticSpec) -> dict[str, Any]:
    return {
        "rate": "peak * (trough + (1 - trough) * ((1 + cos(2 pi (t - peak_at) / day)) / 2) ** sharpness)",
        "peak_sessions_per_s": spec.peak_sessions_per_s,
        "trough": spec.trough,
        "sharpness": spec.sharpness,
        "peak_at_h": spec.peak_at_s / 3600,
        "day_h": spec.day_s / 3600,
        "pattern_bound": round(pattern_bound(spec), 4),
    }


# -- the engines --
class MacroDecodeEngine(DecodeEngine):
    """`DecodeEngine` whose unchanged batch steps until its first turn finishes in one event."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._run: tuple[list[SimTurn], float, float, int] | None = None  # batch, start, step_s, steps
        self._generation = 0

    def admit(self, turn: SimTurn) -> None:
        self.expected -= 1
        self._waiting.append(turn)
        running = len(self._running)
        self._join()
        if self._run is not None and len(self._running) > running:
            batch, start, step_s, steps = self._run
            cut = min(steps, math.floor((self.loop.now() - start) / step_s) + 1)
            if cut < steps:  # the joined turn starts with the step after the one under way
                self._schedule(batch, start, step_s, cut)
        self._step()

    def _step(self) -> None:
        if self._stepping or not self._running:
            return
        batch = list(self._running)
        steps = min(t.output_tokens - t.emitted for t in batch)
        step_s = self.cost.decode_step_s([t.prompt_tokens + t.emitted + (steps - 1) // 2 for t in batch])
        self._stepping = True
        self._schedule(batch, self.loop.now(), step_s, steps)

    def _schedule(self, batch: list[SimTurn], start: float, step_s: float, steps: int) -> None:
        self._generation += 1
        generation = self._generation
        self._run = (batch, start, step_s, steps)
        self.loop.at(start + step_s * steps, lambda: self._ran(generation))

    def _ran(self, generation: int) -> None:
        if generation != self._generation or self._run is None:
            return
        batch, _, step_s, steps = self._run
        self._run = None
        self.busy_s += step_s * steps
        self._stepped(batch, steps)


class ElasticCluster(SimCluster):
    """A cluster whose engines can be added (ready `startup_s` after asking) and drained (out of the
    registry at once, released when it holds no turn), keeping each engine's GPU time and the
    controller's signals: prefill work offered, queued prefill compute, KV blocks of turns in flight."""

    decode_engine_type = MacroDecodeEngine

    def __init__(
        self, loop: EventLoop, config: SimConfig, policy: PolicySet, on_turn_done: Callable[[SimTurn], None]
    ) -> None:
        self.held: dict[str, list[float]] = {}  # engine -> [asked at, released at (inf: not yet)]
        self.outstanding: dict[str, int] = {}
        self.backlog_s: dict[str, float] = {}
        self.draining: set[str] = set()
        self.retired: list[Any] = []
        self.starting = {"prefill": 0, "decode": 0}
        self.next_index = {"prefill": 0, "decode": 0}
        self.offered_work_s = 0.0
        self.inflight_blocks = 0
        self.turn_blocks: dict[int, int] = {}  # by turn seq: the decode blocks it holds or will hold
        self.waits = [0.0, 0]  # observed waits between turns: sum, count
        self.flights = [0.0, 0]  # observed turns from sent to last token: sum, count
        self.events = {"added": 0, "drained": 0, "released": 0}
        super().__init__(loop, config, policy, on_turn_done)

    def add_engine(self, role: str, index: int, on_node: int) -> str:
        engine_id = super().add_engine(role, index, on_node)
        self.held.setdefault(engine_id, [self.loop.now(), math.inf])
        self.outstanding[engine_id] = 0
        self.backlog_s[engine_id] = 0.0
        self.next_index[role] = max(self.next_index[role], index + 1)
        return engine_id

    # -- scaling --
    def active(self, role: str) -> list[str]:
        engines = self.prefills if role == "prefill" else self.decodes
        return [e for e in engines if e not in self.draining]

    def ask(self, role: str, startup_s: float) -> None:
        """Ask for an engine of `role`: its GPU is held from now, it takes turns `startup_s` later."""
        index = self.next_index[role]
        self.next_index[role] += 1
        engine_id = f"{role}-{index}-0"
        self.held[engine_id] = [self.loop.now(), math.inf]
        self.starting[role] += 1
        self.events["added"] += 1

        def ready() -> None:
            self.starting[role] -= 1
            self.add_engine(role, index, 1)

        self.loop.after(startup_s, ready)

    def drain(self, engine_id: str) -> None:
        """No new turn goes to `engine_id`; it is released once the turns it holds are done."""
        self.registry.mark_dead(engine_id)
        self.draining.add(engine_id)
        self.events["drained"] += 1
        self._release_if_idle(engine_id)

    def _release_if_idle(self, engine_id: str) -> None:
        if engine_id not in self.draining or self.outstanding[engine_id]:
            return
        engine = self.prefills.pop(engine_id, None) or self.decodes.pop(engine_id)
        self.retired.append(engine)
        self.draining.discard(engine_id)
        self.held[engine_id][1] = self.loop.now()
        self.events["released"] += 1

    def gpu_seconds(self, until: float) -> float:
        return sum(max(0.0, min(end, until) - start) for start, end in self.held.values())

    # -- what the controller reads --
    def submit(self, turn: SimTurn, session: Any) -> None:
        if turn.index:
            before = turn.agent.turns[turn.index - 1]
            self.waits[0] += turn.submitted_s - (before.done_s or turn.submitted_s)
            self.waits[1] += 1
        super().submit(turn, session)
        assert turn.placement is not None
        work = self.cost.prefill_s(turn.cached_tokens, turn.new_tokens)
        self.offered_work_s += work
        self.backlog_s[turn.placement.prefill.engine_id] += work
        blocks = math.ceil((turn.prompt_tokens + turn.output_tokens) / self.config.block_size)
        self.turn_blocks[turn.seq] = blocks
        self.inflight_blocks += blocks
        for engine in (turn.placement.prefill.engine_id, turn.placement.decode.engine_id):
            self.outstanding[engine] += 1

    def _prefilled(self, turn: SimTurn) -> None:
        assert turn.placement is not None
        engine_id = turn.placement.prefill.engine_id
        self.backlog_s[engine_id] -= self.cost.prefill_s(turn.cached_tokens, turn.new_tokens)
        super()._prefilled(turn)

    def _handed_off(self, turn: SimTurn) -> None:
        assert turn.placement is not None
        engine_id = turn.placement.prefill.engine_id
        self.outstanding[engine_id] -= 1
        super()._handed_off(turn)
        self._release_if_idle(engine_id)

    def _decoded(self, turn: SimTurn) -> None:
        assert turn.placement is not None
        engine_id = turn.placement.decode.engine_id
        self.outstanding[engine_id] -= 1
        self.inflight_blocks -= self.turn_blocks.pop(turn.seq)
        self.flights[0] += self.loop.now() - turn.submitted_s
        self.flights[1] += 1
        super()._decoded(turn)
        self._release_if_idle(engine_id)


# -- the policy --
@dataclass(frozen=True)
class Signals:
    prefill_work_rate: float  # GPU-seconds of prefill compute offered per second lately (EWMA)
    prefill_backlog_s: float  # queued prefill compute per active prefill engine, seconds
    kv_blocks: int  # decode pool blocks that turns in flight hold or will hold
    returning_blocks: float  # blocks of sessions in tool waits, times `in_flight_share`
    in_flight_share: float  # of a session's time, in flight rather than waiting on a tool
    pool_blocks: int  # one decode engine's pool
    prefill: int  # active and starting engines
    decode: int
    decode_pool_waiting: int = 0  # turns waiting for room in an active decode engine's pool
    growth: float = 1.0  # the arrival rate `startup_s + interval_s` ahead over the rate now, at least 1


class ScalingPolicy:
    """Each role's engine count for the signals (pure: `Controller` reads and acts)."""

    def __init__(self, spec: ElasticSpec) -> None:
        self.spec = spec

    def need(self, s: Signals) -> tuple[int, int]:
        spec = self.spec
        prefill = math.ceil(s.growth * s.prefill_work_rate / spec.prefill_target_util)
        if s.prefill_backlog_s > spec.backlog_target_s:  # the queue is deeper than the average shows
            prefill = max(prefill, s.prefill + 1)
        # KV pressure now, or what the sessions in flight and in tool waits hold on average once the
        # waiting ones are back for their share of the time, whichever is more.
        kv = max(s.kv_blocks, s.kv_blocks * s.in_flight_share + s.returning_blocks)
        decode = math.ceil(s.growth * kv / (s.pool_blocks * spec.kv_target))
        if spec.decode_queue and s.decode_pool_waiting:  # a pool is full where turns land
            decode = max(decode, s.decode + 1)
        return self._clamp(prefill), self._clamp(decode)

    def _clamp(self, n: int) -> int:
        return max(1, min(self.spec.max_engines, n))


class Controller:
    """Reads the cluster every `interval_s`, scales out at once and in after `scale_in_after_s`."""

    def __init__(self, spec: ElasticSpec, total_turns: int) -> None:
        self.spec = spec
        self.policy = ScalingPolicy(spec)
        self.total_turns = total_turns
        self.done = 0
        self.work_rate = 0.0
        self.last_work = 0.0
        self.below_since: dict[str, float | None] = {"prefill": None, "decode": None}
        self.low: dict[str, int] = {}
        self.timeline: list[dict[str, Any]] = []

    def start(self, loop: EventLoop, cluster: SimCluster, agents: Agents) -> None:
        assert isinstance(cluster, ElasticCluster)
        self.loop, self.cluster, self.agents = loop, cluster, agents
        on_done = cluster.on_turn_done

        def counted(turn: SimTurn) -> None:
            self.done += 1
            on_done(turn)

        cluster.on_turn_done = counted
        loop.after(self.spec.interval_s, self.tick)

    def signals(self) -> Signals:
        c, spec = self.cluster, self.spec
        sample = (c.offered_work_s - self.last_work) / spec.interval_s
        self.last_work = c.offered_work_s
        self.work_rate += (1 - math.exp(-spec.interval_s / spec.ewma_s)) * (sample - self.work_rate)
        active_p = c.active("prefill")
        backlog = sum(c.backlog_s[e] for e in active_p) / max(1, len(active_p))
        mean_wait = c.waits[0] / c.waits[1] if c.waits[1] else 0.0
        mean_flight = c.flights[0] / c.flights[1] if c.flights[1] else 0.0
        # A waiting session is back in flight this share of the time (turns and waits seen so far).
        back = mean_flight / (mean_flight + mean_wait) if mean_flight + mean_wait > 0 else 1.0
        block = c.config.block_size
        waiting = sum(
            math.ceil(a.context / block)
            for a in self.agents.agents
            if a.turns and a.turns[-1].done_s is not None and a.next_index < len(a.spec.turns)
        )
        return Signals(
            prefill_work_rate=self.work_rate,
            prefill_backlog_s=backlog,
            kv_blocks=c.inflight_blocks,
            returning_blocks=waiting * back,
            in_flight_share=back,
            pool_blocks=c.pool_blocks["decode"],
            prefill=len(active_p) + c.starting["prefill"],
            decode=len(c.active("decode")) + c.starting["decode"],
            decode_pool_waiting=sum(c.decodes[e].pool_waiting for e in c.active("decode")),
            growth=self.growth(),
        )

    def growth(self) -> float:
        """How much the day's arrival rate grows over the lead an added engine needs (at least 1:
        scale-in waits for the load itself)."""
        if not self.spec.forecast:
            return 1.0
        now, lead = self.loop.now(), self.spec.startup_s + self.spec.interval_s
        return max(1.0, rate_at(self.spec, now + lead) / rate_at(self.spec, now))

    def tick(self) -> None:
        if self.done >= self.total_turns:
            return
        s = self.signals()
        need = dict(zip(("prefill", "decode"), self.policy.need(s)))
        have = {"prefill": s.prefill, "decode": s.decode}
        now = self.loop.now()
        for role in ("prefill", "decode"):
            if need[role] > have[role]:
                for _ in range(need[role] - have[role]):
                    self.cluster.ask(role, self.spec.startup_s)
                self.below_since[role] = None
            elif need[role] < have[role]:
                since = self.below_since[role]
                if since is None:
                    self.below_since[role], self.low[role] = now, need[role]
                    continue
                self.low[role] = max(self.low[role], need[role])
                if now - since >= self.spec.scale_in_after_s:
                    self._drain(role, have[role] - self.low[role])
                    self.below_since[role] = None
            else:
                self.below_since[role] = None
        self.timeline.append({"t_h": round(now / 3600, 3), **{k: have[k] for k in have}, "need": need})
        self.loop.after(self.spec.interval_s, self.tick)

    def _drain(self, role: str, count: int) -> None:
        c = self.cluster
        active = c.active(role)
        # Never below one engine; those holding the fewest turns first, the newest among equals.
        for engine_id in sorted(active, key=lambda e: (c.outstanding[e], -c.next_index[role]))[
            : min(count, len(active) - 1)
        ]:
            c.drain(engine_id)


# -- the comparison --
def base_config(spec: ElasticSpec) -> SimConfig:
    """Engines of one GPU, each its own node with a static share of a node's storage NIC."""
    return SimConfig(
        model=spec.model,
        gpu=spec.gpu,
        kv_dtype=spec.kv_dtype,
        gpus_per_node=1,
        snic_gbps=ENGINE_SNIC_GBPS,
    )


def size_static(spec: ElasticSpec, progress: bool = False) -> tuple[Point, dict[str, Any]]:
    peak = peak_workload(spec, spec.seed)
    ev = Evaluator(
        workload=peak,
        slo=SLO.parse(spec.slo),
        base=base_config(spec),
        prices=Prices(),
        turn_order=resolve(spec.policy).turn_order.name,
        draw=lambda seed: peak_workload(spec, seed),
        cluster_factory=ElasticCluster,
    )
    search = Search(ev, Space((spec.policy,), (ENGINE_SNIC_GBPS,), 2 * spec.max_engines), progress)
    search.run((spec.policy, ENGINE_SNIC_GBPS))
    chosen, consistency = search.choose()
    if chosen is None:
        raise ValueError(f"no deployment of up to {2 * spec.max_engines} GPUs meets {spec.slo} at the peak rate")
    return chosen.point, {
        "trials": [t.to_dict() for (_, s), t in ev.trials.items() if s == 0],
        "consistent": consistency["consistent"],
        "peak_window": peak.source,
    }


def day_run(
    spec: ElasticSpec, point: Point, day: PlanWorkload, controller: Controller | None = None
) -> tuple[dict[str, Any], ElasticCluster]:
    config = point.config(base_config(spec))
    holder: list[ElasticCluster] = []

    def factory(*args: Any) -> ElasticCluster:
        holder.append(ElasticCluster(*args))
        return holder[0]

    result = simulate(
        config,
        resolve(spec.policy),
        day.workload,
        list(day.arrivals),
        None,
        spec.seed,
        cluster_factory=factory,
        on_start=controller.start if controller else None,
    )
    cluster = holder[0]
    slo = SLO.parse(spec.slo)
    horizon = max(spec.day_s, result.duration_s + min(day.arrivals))
    check = slo.check(result.records)
    return {
        "attainment": round(slo.attained(result.records), 4),
        "meets_slo": check.meets,
        "slo_check": check.to_json(),
        "turns": len(result.records),
        "turns_failed": sum(not r.ok for r in result.records),
        "gpu_hours": round(cluster.gpu_seconds(horizon) / 3600, 2),
        "wall_s": round(result.wall_s, 1),
    }, cluster


def run_elastic(spec: ElasticSpec, progress: bool = False) -> dict[str, Any]:
    started = time.monotonic()
    static, sizing = size_static(spec, progress)
    day = day_workload(spec, spec.seed)
    static_run, _ = day_run(spec, static, day)
    share = rate_at(spec, 0.0) / spec.peak_sessions_per_s
    start = replace(
        static, prefill=max(1, math.ceil(static.prefill * share)), decode=max(1, math.ceil(static.decode * share))
    )
    controller = Controller(spec, day.workload.num_turns)
    elastic_run, cluster = day_run(spec, start, day, controller)
    saved = 1 - elastic_run["gpu_hours"] / static_run["gpu_hours"]
    return {
        "gpu_hours_saved": round(saved, 4),
        "slo_attainment_static": static_run["attainment"],
        "slo_attainment_elastic": elastic_run["attainment"],
        "target": {"gpu_hours_saved": ">= 0.5", "slo": "elastic attainment >= static", "aspeed": 0.719},
        "met": saved >= 0.5 and elastic_run["attainment"] >= static_run["attainment"],
        "pattern_bound": round(pattern_bound(spec), 4),
        "static": {**static.to_dict(), **static_run, "sized_for": "an hour at the peak rate", "sizing": sizing},
        "elastic": {
            **elastic_run,
            "start": start.to_dict(),
            "engines_added": cluster.events["added"],
            "engines_drained": cluster.events["drained"],
            "engines_released": cluster.events["released"],
            "peak_engines": {
                role: max((row[role] for row in controller.timeline), default=0) for role in ("prefill", "decode")
            },
            "timeline": controller.timeline[:: max(1, len(controller.timeline) // 96)],
        },
        "scaling_policy": {
            "signals": "queue depth (offered prefill work EWMA, queued compute per prefill engine), KV pressure "
            "(decode blocks of turns in flight), tool waits (blocks of waiting sessions x the share of a "
            "session's time in flight)",
            **{
                k: v
                for k, v in vars(spec).items()
                if k not in ("peak_sessions_per_s", "trough", "sharpness", "peak_at_s", "day_s")
            },
        },
        "workload": {**day.source, "sessions": len(day.workload.sessions), "turns": day.workload.num_turns},
        "drain": "a draining engine leaves the registry, finishes its turns, then is released; sessions' KV "
        "stays in the store between turns, so their next turns load it on any engine",
        "wall_s": round(time.monotonic() - started, 1),
    }
