"""The multi-agent workload every lifecycle policy serves: jobs shaped as code-writer and
deep-research DAGs, tool times drawn from the TraceLab sample.

- code-writer: a planner's turn fans out to `width` coders (each works `rounds` turns, calling a
  tool after every turn but its last); a reviewer gathers every coder's last output (all-gather),
  calls a tool (the tests), and answers; the planner's second turn accepts the review.
- deep-research: a lead's turn fans out to `width` researchers; in every round each researcher
  searches (a tool call) and then, from the second round on, reads what all researchers found in
  the round before (all-gather: every peer's turn waits for all peers' previous turn and receives
  the same gathered text); the lead's second turn writes the report from all of it.

Every tool call is a (name, duration) pair drawn with replacement from the TraceLab sample's
calls, so the mix of short calls and long ones is the recorded one. What the caller predicts for a
call (told to the scheduler) is `prediction`: `median` (the sample's median for that tool name, what
an agent framework knows), `exact` (an oracle) or `none`.

Sessions on a job's critical path (`Session.critical`) are its coordinators (planner, reviewer,
lead) and the worker with the most tool time, the one the job most likely waits for.
Times are target seconds; token counts are target tokens.
"""

from __future__ import annotations

import json
import random
import statistics
from collections import defaultdict
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any

from agentserve.bench.common.workloads.model import Session, ToolCall, Turn, Workload
from agentserve.bench.common.workloads.traces import TRACELAB_ROUNDS

SHAPES = ("code-writer", "deep-research")
PREDICTIONS = ("median", "exact", "none")
SYSTEM_PREFIX = "agent-system"
DEFAULT_TRACE = TRACELAB_ROUNDS


@dataclass(frozen=True)
class ToolSample:
    """The recorded tool calls tool times are drawn from: (name, seconds) pairs."""

    calls: tuple[tuple[str, float], ...]
    source: str = ""

    def __post_init__(self) -> None:
        if not self.calls:
            raise ValueError(f"no tool calls in {self.source or 'the sample'}")

    def medians(self) -> dict[str, float]:
        by_name: dict[str, list[float]] = defaultdict(list)
        for name, seconds in self.calls:
            by_name[name].append(seconds)
        return {name: statistics.median(values) for name, values in sorted(by_name.items())}

    def to_dict(self) -> dict:
        seconds = sorted(s for _, s in self.calls)
        return {
            "source": self.source,
            "calls": len(seconds),
            "min_s": seconds[0],
            "median_s": statistics.median(seconds),
            "mean_s": round(statistics.fmean(seconds), 3),
            "max_s": seconds[-1],
            "median_by_tool_s": self.medians(),
        }


def read_tool_sample(path: Path) -> ToolSample:
    """Every tool call of a TraceLab round trace, with its recorded wall latency."""
    calls = []
    with Path(path).open() as f:
        for lineno, line in enumerate(f, 1):
            if not line.strip():
                continue
            try:
                for tool in json.loads(line).get("tools") or []:
                    calls.append((str(tool.get("tool_name") or "tool"), float(tool["tool_wall_latency_ms"]) / 1000))
            except (ValueError, KeyError, TypeError, AttributeError) as exc:
                raise ValueError(f"{path}:{lineno}: not a TraceLab round: {exc!r}") from None
    return ToolSample(tuple(calls), f"tracelab:{Path(path).name}")


@dataclass(frozen=True)
class AgentAwareSpec:
    jobs: int = 16  # alternately code-writer and deep-research
    width: int = 3  # coders or researchers per job
    rounds: int = 3  # turns per coder, research rounds per researcher
    system_tokens: int = 2048  # the shared agent system prompt, cached before the run
    first_tokens: int = 1024  # a session's first message
    new_tokens: int = 384  # a later turn's message (tool result), uniform within +-50%
    output_tokens: int = 64
    prediction: str = "median"
    seed: int = 0

    def __post_init__(self) -> None:
        for name in ("jobs", "width", "rounds", "first_tokens", "new_tokens", "output_tokens"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be >= 1, got {getattr(self, name)}")
        if self.system_tokens < 0:
            raise ValueError(f"system_tokens must be >= 0, got {self.system_tokens}")
        if self.prediction not in PREDICTIONS:
            raise ValueError(f"prediction must be one of {', '.join(PREDICTIONS)}, got {self.prediction!r}")

    def to_dict(self) -> dict:
        return asdict(self)


class _Job:
    def __init__(self, spec: AgentAwareSpec, sample: ToolSample, rng: random.Random, name: str) -> None:
        self.spec, self.sample, self.rng, self.name = spec, sample, rng, name
        self.medians = sample.medians()

    def tool(self) -> ToolCall:
        name, seconds = self.rng.choice(self.sample.calls)
        predicted = {"median": self.medians[name], "exact": seconds, "none": None}[self.spec.prediction]
        return ToolCall(name, seconds, predicted_s=predicted if predicted else None)

    def turn(self, first: bool = False, tool: bool = False, after: tuple[str, ...] = (), **kw: Any) -> Turn:
        s = self.spec
        new = kw.pop("new_tokens", None) or max(
            1, round((s.first_tokens if first else s.new_tokens) * self.rng.uniform(0.5, 1.5))
        )
        return Turn(s.output_tokens, new, tools=(self.tool(),) if tool else (), after=after, **kw)

    def session(self, role: str, turns: list[Turn]) -> Session:
        prefix = SYSTEM_PREFIX if self.spec.system_tokens else None
        return Session(
            f"{self.name}-{role}", tuple(turns), agent=role.rstrip("0123456789"), tenant="agentaware", prefix=prefix
        )

    def code_writer(self) -> list[Session]:
        s, lead = self.spec, f"{self.name}-planner"
        coders = [
            self.session(
                f"coder{i}",
                [
                    self.turn(r == 0, tool=r < s.rounds - 1, after=(f"{lead}#0",) if r == 0 else ())
                    for r in range(s.rounds)
                ],
            )
            for i in range(s.width)
        ]
        gathered = s.width * s.output_tokens
        reviewer = self.session(
            "reviewer",
            [
                self.turn(tool=True, after=tuple(c.id for c in coders), new_tokens=gathered),
                self.turn(),
            ],
        )
        planner = self.session("planner", [self.turn(True), self.turn(after=(reviewer.id,))])
        return [planner, *coders, reviewer]

    def deep_research(self) -> list[Session]:
        s, lead = self.spec, f"{self.name}-lead"
        ids = [f"{self.name}-researcher{i}" for i in range(s.width)]
        gathered = s.width * s.output_tokens
        researchers = [
            self.session(
                f"researcher{i}",
                [
                    self.turn(True, tool=True, after=(f"{lead}#0",))
                    if r == 0
                    else self.turn(
                        tool=r < s.rounds - 1,
                        after=tuple(f"{o}#{r - 1}" for o in ids if o != ids[i]),
                        new_tokens=gathered,
                        content_key=f"{self.name}-gather-{r - 1}",
                    )
                    for r in range(s.rounds)
                ],
            )
            for i in range(s.width)
        ]
        lead_session = self.session("lead", [self.turn(True), self.turn(after=tuple(ids), new_tokens=gathered)])
        return [lead_session, *researchers]


def _with_critical_path(job: list[Session]) -> list[Session]:
    """Coordinators (a session that gathers others) and the worker with the most tool time."""
    workers = [s for s in job if s.agent in ("coder", "researcher")]
    slowest = max(workers, key=lambda s: sum(t.tool_time_s() for t in s.turns))
    return [replace(s, critical=s.agent not in ("coder", "researcher") or s is slowest) for s in job]


def generate(spec: AgentAwareSpec, sample: ToolSample) -> Workload:
    rng = random.Random(spec.seed)
    sessions: list[Session] = []
    for j in range(spec.jobs):
        shape = SHAPES[j % len(SHAPES)]
        job = _Job(spec, sample, rng, f"j{j:03d}")
        made = job.code_writer() if shape == "code-writer" else job.deep_research()
        sessions += _with_critical_path(made)
    prefixes = {SYSTEM_PREFIX: spec.system_tokens} if spec.system_tokens else {}
    name = f"agentaware-{spec.jobs}jobs-w{spec.width}r{spec.rounds}"
    return Workload(name, tuple(sessions), source=sample.source, prefixes=prefixes).validate()


def job_of(session_id: str) -> str:
    return session_id.split("-", 1)[0]


def job_shape(workload: Workload) -> dict[str, str]:
    """Job name -> its shape, read from its sessions' roles."""
    shapes: dict[str, str] = {}
    for s in workload.sessions:
        if s.agent in ("planner", "lead"):
            shapes[job_of(s.id)] = "code-writer" if s.agent == "planner" else "deep-research"
    return shapes


def describe(workload: Workload) -> dict:
    """Agents, turns, tool calls and token totals of the generated workload."""
    tools = [t for s in workload.sessions for turn in s.turns for t in turn.tools]
    finals = []
    for s in workload.sessions:
        context = workload.prefixes.get(s.prefix or "", 0)
        for t in s.turns:
            context += t.new_tokens + t.output_tokens
        finals.append(context)
    return {
        "jobs": len(job_shape(workload)),
        "jobs_by_shape": {shape: list(job_shape(workload).values()).count(shape) for shape in SHAPES},
        "agents": len(workload.sessions),
        "critical_agents": sum(s.critical for s in workload.sessions),
        "turns": workload.num_turns,
        "tool_calls": len(tools),
        "tool_seconds_total": round(sum(t.duration_s for t in tools), 3),
        "final_context_tokens_total": sum(finals),
        "final_context_tokens_max": max(finals),
    }
