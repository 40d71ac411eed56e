"""What `agentserve plan` serves: a trace file read as it is, or a generated agent workload.

Either becomes agents the simulator runs (`sim/agents.py`): sessions whose turns grow one context,
arriving at stated times, with the waits between turns taken from the workload itself (a turn's
tool calls, then the next turn's think time; `simulate(tool_wait_s=None)`).

- A **Mooncake** trace (`timestamp`, `input_length`, `output_length`, `hash_ids`; one request a
  line) is read by the replay's own reader (`read_mooncake`), which links a request to the earlier
  one whose prompt it extends. A chain of such requests is one conversation: its first request a
  first turn, the others later turns sent the recorded gap after the request before them (the gap
  includes the recorded service's own answer time, so sessions run slightly longer than recorded).
  A first turn's store hits are the leading 512-token blocks any earlier request already had (a
  system prompt shared across conversations); a later turn appends what its prompt grew by beyond
  the previous prompt and answer (at least one token: 11% of follow-ups in the conversation trace
  drop part of the previous answer, and are read as appending one token). `window_s` keeps the
  requests of the trace's first `window_s` seconds.
- A **TraceLab** round trace: `read_tracelab(reuse="context")`, every session arriving at 0.
- A **generator spec** `coding[:key=value,...]`: independent coding-agent sessions from the
  workload generator (`bench/common/workloads/generator.py`), keys `sessions`, `turns`, `system`,
  `first`, `new` (context growth per turn, +-50%), `output`, `tool` (tool-wait distribution:
  `const:X`, `exp:MEAN`, `uniform:LO,HI`, `lognormal:MEDIAN,SIGMA`), `tool_prob`, `rate` (sessions
  arriving per second, Poisson). Defaults are `CODING` below, shaped after the TraceLab sessions
  the repository ships.

A seed changes what it can: a generated workload is drawn again from it; a trace keeps its
requests and lengths, and seed k > 0 moves each conversation's start by a uniform draw within
+-`jitter_s` (seed 0 is the trace's own timing).
"""

from __future__ import annotations

import json
import random
from dataclasses import dataclass, fields, replace
from pathlib import Path
from typing import Any

from agentserve.bench.common.workloads.generator import GeneratorSpec, generate
from agentserve.bench.common.workloads.model import Session, Turn, Workload
from agentserve.bench.common.workloads.mooncake import MOONCAKE_BLOCK_TOKENS, read_mooncake
from agentserve.bench.common.workloads.tracelab import read_tracelab

DEFAULT_JITTER_S = 30.0


@dataclass(frozen=True)
class CodingSpec:
    """A generated coding-agent workload: `sessions` agents of `turns` turns, each starting from a
    shared `system` prompt plus `first` tokens of task and files, adding `new` tokens a turn (tool
    results), answering `output` tokens, calling a tool after a turn with probability `tool_prob`
    for a time from `tool`, agents arriving at `rate` per second."""

    sessions: int = 300
    turns: int = 16
    system: int = 16384
    first: int = 8192
    new: int = 2048
    output: int = 384
    tool: str = "lognormal:2.0,1.2"
    tool_prob: float = 0.9
    rate: float = 0.5

    def __post_init__(self) -> None:
        if not self.rate > 0:
            raise ValueError(f"coding rate must be > 0 sessions/s (the offered load), got {self.rate}")
        self.generator(0)  # the generator's own checks, naming the field

    def generator(self, seed: int) -> GeneratorSpec:
        return GeneratorSpec(
            teams=self.sessions,
            agents=1,
            turns=self.turns,
            pattern="independent",
            system_tokens=self.system,
            first_tokens=self.first,
            new_tokens=self.new,
            output_tokens=self.output,
            tool_prob=self.tool_prob,
            tool_time=self.tool,
            arrival_rate=self.rate,
            seed=seed,
        )

    def to_dict(self) -> dict[str, Any]:
        return {f.name: getattr(self, f.name) for f in fields(self)}


CODING = CodingSpec()


@dataclass(frozen=True)
class PlanWorkload:
    workload: Workload  # context-based sessions, the waits between turns their own
    arrivals: tuple[float, ...]  # of each session, seconds
    source: dict[str, Any]  # what it was made from, for the output

    @property
    def duration_s(self) -> float:
        """Span of the arrivals: the window the offered load is measured over (at least 1 s)."""
        return max(1.0, max(self.arrivals) - min(self.arrivals)) if self.arrivals else 1.0

    def shape(self) -> dict[str, Any]:
        sessions = self.workload.sessions
        turns = [t for s in sessions for t in s.turns]
        later = [t for s in sessions for t in s.turns[1:]]
        return {
            "sessions": len(sessions),
            "turns": len(turns),
            "later_turns": len(later),
            "sessions_per_s": round(len(sessions) / self.duration_s, 4),
            "turns_per_s": round(len(turns) / self.duration_s, 4),
            "mean_new_tokens": round(sum(t.new_tokens for t in turns) / len(turns), 1) if turns else None,
            "mean_output_tokens": round(sum(t.output_tokens for t in turns) / len(turns), 1) if turns else None,
            "mean_wait_between_turns_s": round(
                sum(a.tool_time_s() + b.think_s for s in sessions for a, b in zip(s.turns, s.turns[1:])) / len(later),
                2,
            )
            if later
            else None,
            "window_s": round(self.duration_s, 1),
        }


def parse_coding(text: str) -> CodingSpec:
    """`coding` or `coding:sessions=300,rate=0.5,...` -> CodingSpec (unknown keys are errors)."""
    kind, _, params = text.partition(":")
    if kind != "coding":
        raise ValueError(f"--workload {text!r}: not a file, and not a generator spec (coding[:key=value,...])")
    known = {f.name: f.type for f in fields(CodingSpec)}
    values: dict[str, Any] = {}
    # `tool` holds commas of its own (lognormal:2,1.2): a part without '=' continues the one before.
    parts: list[str] = []
    for part in filter(None, (p.strip() for p in params.split(","))):
        if "=" not in part and parts:
            parts[-1] += "," + part
        else:
            parts.append(part)
    for part in parts:
        key, eq, value = part.partition("=")
        if not eq or key not in known:
            raise ValueError(f"--workload coding: unknown key {key!r}; keys are {', '.join(known)}")
        try:
            values[key] = value if key == "tool" else (float(value) if key in ("rate", "tool_prob") else int(value))
        except ValueError:
            raise ValueError(f"--workload coding: {key}={value!r} is not a number") from None
    return replace(CODING, **values)


def load(spec: str, seed: int = 0, window_s: float | None = None, jitter_s: float = DEFAULT_JITTER_S) -> PlanWorkload:
    """The workload `--workload spec` names, drawn or jittered with `seed`."""
    path = Path(spec)
    if path.is_file():
        kind = _file_kind(path)
        if kind == "mooncake":
            return _mooncake(path, seed, window_s, jitter_s)
        tl = read_tracelab(path, reuse="context")
        return PlanWorkload(tl, tuple(s.arrival_s for s in tl.sessions), {"kind": "tracelab", "path": str(path)})
    if spec.startswith("coding"):
        coding = parse_coding(spec)
        workload = generate(coding.generator(seed))
        return PlanWorkload(
            workload,
            tuple(s.arrival_s for s in workload.sessions),
            {"kind": "generated coding agents", "spec": coding.to_dict(), "seed": seed},
        )
    raise ValueError(
        f"--workload {spec!r}: no such file, and not a generator spec "
        "(a Mooncake or TraceLab JSONL trace, or coding[:sessions=N,turns=N,rate=R,...])"
    )


def _file_kind(path: Path) -> str:
    with path.open() as f:
        for line in f:
            if line.strip():
                try:
                    row = json.loads(line)
                except ValueError:
                    break
                if isinstance(row, dict) and "hash_ids" in row:
                    return "mooncake"
                if isinstance(row, dict) and "round_index" in row:
                    return "tracelab"
                break
    raise ValueError(f"--workload {path}: neither a Mooncake trace (hash_ids) nor a TraceLab round trace")


def _mooncake(path: Path, seed: int, window_s: float | None, jitter_s: float) -> PlanWorkload:
    trace = read_mooncake(path)
    seen: set[int] = set()  # chained block ids: one names its whole prefix
    chains: dict[str, list[Session]] = {}
    root: dict[str, str] = {}
    first_hits: dict[str, int] = {}
    for s in trace.sessions:
        if window_s is not None and s.arrival_s >= window_s:
            continue
        ids = s.turns[0].hash_ids
        parent = s.after[0] if s.after else None
        if parent in root:
            root[s.id] = root[parent]
            chains[root[s.id]].append(s)
        else:
            root[s.id] = s.id
            chains[s.id] = [s]
            hit = 0
            while hit < len(ids) and ids[hit] in seen:
                hit += 1
            first_hits[s.id] = min(hit * MOONCAKE_BLOCK_TOKENS, s.turns[0].input_tokens - 1)
        seen.update(ids[: s.turns[0].input_tokens // MOONCAKE_BLOCK_TOKENS])
    rng = random.Random(seed)
    sessions, arrivals, prefixes = [], [], {}
    for chain in chains.values():
        head = chain[0]
        hit = first_hits[head.id]
        turns = [Turn(output_tokens=head.turns[0].output_tokens, new_tokens=head.turns[0].input_tokens - hit)]
        context = head.turns[0].input_tokens + head.turns[0].output_tokens
        for before, req in zip(chain, chain[1:]):
            t = req.turns[0]
            think = round(req.arrival_s - before.arrival_s, 3)
            turns.append(
                Turn(output_tokens=t.output_tokens, new_tokens=max(1, t.input_tokens - context), think_s=think)
            )
            context = max(context + 1, t.input_tokens) + t.output_tokens
        prefix = None
        if hit:
            prefix = f"shared-{hit}"
            prefixes[prefix] = hit
        sessions.append(Session(head.id, tuple(turns), arrival_s=head.arrival_s, tenant="mooncake", prefix=prefix))
        shift = rng.uniform(-jitter_s, jitter_s) if seed else 0.0
        arrivals.append(max(0.0, head.arrival_s + shift))
    workload = Workload(path.stem, tuple(sessions), source=f"mooncake:{path.name}", prefixes=prefixes)
    source = {
        "kind": "mooncake trace",
        "path": str(path),
        "window_s": window_s,
        "requests": sum(len(c) for c in chains.values()),
        "conversations": len(chains),
        "seed": seed,
        "jitter_s": jitter_s if seed else 0.0,
    }
    return PlanWorkload(workload.validate(), tuple(arrivals), source)
