"""Replayer: drives a serving system with a `Workload`, keeping its causality.

A turn starts only when (1) the previous turn of its session has its whole output and its tool
calls have returned, `think_s` later, and (2) every turn it depends on has finished. Sessions
start at their arrival; how arrivals are produced is the load model:

- recorded (default): each session at `arrival_s / speedup` (open loop, the trace's schedule);
- `rate`: jobs (sessions connected by dependencies: a conversation, an agent team) arrive as a
  Poisson process of `rate` per second (open loop);
- `concurrency`: `concurrency` jobs in flight, the next one starting when one finishes (closed
  loop).

`speedup` also divides think and tool times. Tool calls go through the system's tool proxy as
`sleep` with the (scaled) recorded duration, so the scheduler sees every tool wait.
"""

from __future__ import annotations

import asyncio
import random
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from agentserve.bench.common.workloads.model import Session, ToolCall, Turn, Workload, components, turn_prerequisites
from agentserve.bench.common.workloads.reuse import servable
from agentserve.bench.common.workloads.tokens import TokenSynth
from agentserve.bench.papers.replay.client import ServerBusy, ServerSession, ServingClient
from agentserve.bench.papers.replay.prompts import PromptPlanner, SessionState
from agentserve.bench.papers.replay.records import SessionRecord, TurnRecord

# A refused turn is sent again after the server's Retry-After at most this many times (then it
# fails): overload that lasts longer is a result to report, not to wait out.
MAX_BUSY_RETRIES = 100


@dataclass(frozen=True)
class ReplayOptions:
    speedup: float = 1.0
    rate: float | None = None  # jobs per second, open loop
    concurrency: int | None = None  # jobs in flight, closed loop
    duration_s: float | None = None  # start no job later than this (rate and closed loop)
    tenant_tag: str = ""  # appended to every tenant: runs never share cache
    seed: int = 0
    kv_block_tokens: int = 16
    tool: str = "sleep"

    def __post_init__(self) -> None:
        if self.speedup <= 0:
            raise ValueError(f"speedup must be > 0, got {self.speedup}")
        if self.rate is not None and self.concurrency is not None:
            raise ValueError("choose open loop (rate) or closed loop (concurrency), not both")
        if self.rate is not None and self.rate <= 0:
            raise ValueError(f"rate must be > 0, got {self.rate}")
        if self.concurrency is not None and self.concurrency < 1:
            raise ValueError(f"concurrency must be >= 1, got {self.concurrency}")
        if self.duration_s is not None and self.duration_s <= 0:
            raise ValueError(f"duration must be > 0, got {self.duration_s}")

    @property
    def load_model(self) -> str:
        return "closed" if self.concurrency is not None else "rate" if self.rate is not None else "recorded"


@dataclass
class ReplayResult:
    turns: list[TurnRecord]
    sessions: list[SessionRecord]
    started_unix_s: float  # wall clock at replay time 0
    duration_s: float
    jobs_started: int
    jobs_total: int
    warmup_prefixes: dict[str, int] = field(default_factory=dict)


class Replayer:
    def __init__(
        self,
        workload: Workload,
        client: ServingClient,
        options: ReplayOptions = ReplayOptions(),
        synth: TokenSynth | None = None,
        on_turn: Callable[[TurnRecord], None] | None = None,
    ) -> None:
        self.workload = workload
        self.client = client
        self.options = options
        self.planner = PromptPlanner(workload, synth or TokenSynth())
        self.on_turn = on_turn
        self._by_id = workload.by_id()
        self._done = {(s.id, i): asyncio.Event() for s in workload.sessions for i in range(len(s.turns))}
        self._turns: list[TurnRecord] = []
        self._sessions: list[SessionRecord] = []
        self._t0 = 0.0
        self._warmed: dict[str, int] = {}

    def _now(self) -> float:
        return time.monotonic() - self._t0

    def tenant(self, session: Session) -> str:
        return f"{session.tenant or 'bench'}{self.options.tenant_tag}"

    async def run(self) -> ReplayResult:
        """Replay every job; call `warm_prefixes()` first when the workload has shared prefixes."""
        self._t0, started_unix = time.monotonic(), time.time()
        jobs = components(self.workload)
        o = self.options
        if o.concurrency is not None:
            started = await self._closed_loop(jobs, o.concurrency)
        else:
            if o.rate is not None:
                rng, t, starts = random.Random(o.seed), 0.0, []
                for _ in jobs:
                    starts.append(t)
                    t += rng.expovariate(o.rate)
            else:
                first = min((s.arrival_s for s in self.workload.sessions), default=0.0)
                starts = [(min(s.arrival_s for s in job) - first) / o.speedup for job in jobs]
            chosen = [(job, at) for job, at in zip(jobs, starts) if o.duration_s is None or at < o.duration_s]
            await asyncio.gather(*(self._run_job(job, at) for job, at in chosen))
            started = len(chosen)
        return ReplayResult(
            sorted(self._turns, key=lambda r: r.sent_s),
            self._sessions,
            started_unix,
            self._now(),
            started,
            len(jobs),
            dict(self._warmed),
        )

    async def _closed_loop(self, jobs: list[list[Session]], concurrency: int) -> int:
        slots = asyncio.Semaphore(concurrency)
        tasks = []

        async def run(job: list[Session], at: float) -> None:
            try:
                await self._run_job(job, at)
            finally:
                slots.release()

        for job in jobs:
            await slots.acquire()
            if self.options.duration_s is not None and self._now() >= self.options.duration_s:
                slots.release()
                break
            tasks.append(asyncio.create_task(run(job, self._now())))
        await asyncio.gather(*tasks)
        return len(tasks)

    async def _run_job(self, job: list[Session], at: float) -> None:
        origin = min(s.arrival_s for s in job)
        await asyncio.gather(*(self._run_session(s, at + (s.arrival_s - origin) / self.options.speedup) for s in job))

    async def warm_prefixes(self) -> dict[str, int]:
        """Compute every shared prefix once, untimed: the trace found them cached before it began."""
        warmed = self._warmed
        pairs = sorted({(s.prefix, self.tenant(s)) for s in self.workload.sessions if s.prefix is not None})
        for prefix, tenant in pairs:
            tokens = self.planner.synth.prefix(prefix, self.workload.prefixes[prefix])
            session = await self.client.open_session(tenant, "warmup")
            try:
                async for _ in session.turn(tokens, 1):
                    pass
            finally:
                await session.close()
            warmed[prefix] = len(tokens)
        return warmed

    async def _run_session(self, session: Session, start_at: float) -> None:
        await asyncio.sleep(max(0.0, start_at - self._now()))
        record = SessionRecord(session.id, self._now())
        self._sessions.append(record)
        state = self.planner.start(session)
        server: ServerSession | None = None
        aborted = ""
        for i, turn in enumerate(session.turns):
            waits = [
                self._done[need].wait() for need in turn_prerequisites(self._by_id, session, i) if need[0] != session.id
            ]
            await asyncio.gather(asyncio.sleep(turn.think_s / self.options.speedup), *waits)
            try:
                if aborted:
                    result = TurnRecord(session.id, i, session.is_first(i), self._now(), error=f"aborted: {aborted}")
                else:
                    result, server = await self._turn(state, i, server)
                    if result.ok and turn.tools and server is not None:  # a turn that succeeded has one
                        await self._tools(server, turn, result)
                    aborted = result.error
            finally:
                self._done[(session.id, i)].set()
            result.done_s = self._now()
            record.turns += 1
            record.failed_turns += not result.ok
            record.tool_s += result.tool_s
            record.engines.update(e for e in (result.prefill_engine, result.decode_engine) if e)
            self._turns.append(result)
            if self.on_turn is not None:
                self.on_turn(result)
        record.end_s = self._now()
        if server is not None:
            await _close_quietly(server)

    async def _turn(
        self, state: SessionState, index: int, server: ServerSession | None
    ) -> tuple[TurnRecord, ServerSession | None]:
        session, turn = state.session, state.session.turns[index]
        plan = self.planner.plan(state, index, server is not None)
        block = self.options.kv_block_tokens
        record = TurnRecord(
            session.id,
            index,
            session.is_first(index),
            self._now(),
            prompt_tokens=len(plan.tokens),
            expected_cached_tokens=servable(plan.reusable, len(plan.tokens), block),
            trace_cached_tokens=servable(plan.trace_reusable, len(plan.tokens), block),
        )
        output: list[int] = []
        try:
            if plan.continues and server is not None:  # the planner continues only an open session
                send = plan.tokens[len(state.context) :]
            else:
                if server is not None:
                    await _close_quietly(server)
                    server = None
                server = await self._open(session, record)
                send = plan.tokens
            record.sent_s = self._now()
            while True:
                try:
                    await self._stream(server, send, turn.output_tokens, len(plan.tokens), record, output)
                    break
                except ServerBusy as exc:
                    if output:
                        raise
                    await self._wait_busy(record, exc)
        except Exception as exc:  # noqa: BLE001 - any failure is this turn's outcome, recorded not raised
            record.error = f"{type(exc).__name__}: {exc}"
        record.output_tokens = len(output)
        if record.ok:
            self.planner.finished(state, index, plan.tokens, output)
        return record, server

    async def _open(self, session: Session, record: TurnRecord) -> ServerSession:
        while True:
            try:
                return await self.client.open_session(self.tenant(session), session.agent, session.critical)
            except ServerBusy as exc:
                await self._wait_busy(record, exc)

    async def _wait_busy(self, record: TurnRecord, busy: ServerBusy) -> None:
        """Wait out a refusal's Retry-After before sending again; past MAX_BUSY_RETRIES it fails the turn."""
        if record.retries >= MAX_BUSY_RETRIES:
            raise busy
        record.retries += 1
        started = self._now()
        await asyncio.sleep(busy.retry_after_s)
        record.busy_s += self._now() - started

    async def _stream(
        self,
        server: ServerSession,
        send: list[int],
        max_tokens: int,
        prompt_tokens: int,
        record: TurnRecord,
        output: list[int],
    ) -> None:
        """One attempt at the turn: its chunks into `record` and `output`."""
        async for chunk in server.turn(send, max_tokens):
            now = self._now()
            if chunk.cached_tokens is not None:
                record.cached_tokens = chunk.cached_tokens
                record.prefill_engine, record.decode_engine = chunk.prefill_engine, chunk.decode_engine
                record.handoff_held_blocks, record.loaded_blocks = chunk.handoff_held_blocks, chunk.loaded_blocks
                if chunk.prompt_tokens is not None and chunk.prompt_tokens != prompt_tokens:
                    raise RuntimeError(
                        f"the server's prompt has {chunk.prompt_tokens} tokens, the replay's "
                        f"{prompt_tokens}: histories diverged"
                    )
            if chunk.token_ids:
                if not output:
                    record.first_token_s = now
                if len(output) < 2 <= len(output) + len(chunk.token_ids):
                    record.second_token_s = now
                output.extend(chunk.token_ids)
                record.last_token_s = now

    async def _tools(self, server: ServerSession, turn: Turn, record: TurnRecord) -> None:
        speedup = self.options.speedup

        async def call(tool: ToolCall) -> None:
            await asyncio.sleep(tool.start_s / speedup)
            predicted = None if tool.predicted_s is None else tool.predicted_s / speedup
            await server.call_tool(self.options.tool, {"seconds": round(tool.duration_s / speedup, 6)}, predicted)

        started = self._now()
        results = await asyncio.gather(*(call(t) for t in turn.tools), return_exceptions=True)
        record.tool_s = self._now() - started
        failures = [r for r in results if isinstance(r, BaseException)]
        if failures:
            record.error = f"tool call failed: {type(failures[0]).__name__}: {failures[0]}"


async def _close_quietly(server: ServerSession) -> None:
    try:
        await server.close()
    except Exception:  # noqa: BLE001 - closing only frees server memory; the replay goes on
        pass
