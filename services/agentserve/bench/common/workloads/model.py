"""The in-memory workload every reader produces and the replayer consumes.

A `Workload` is sessions; a session is an agent's ordered turns. A turn's prompt is either

- *context-based*: the first `reuse_tokens` of the session's context (all of it when None) plus
  `new_tokens` fresh tokens. The context is the previous turn's prompt and output, or, before the
  first turn, the shared prefix the session names (`Session.prefix`, e.g. an agent's system prompt
  cached by earlier, unrecorded traffic); or
- *hash-based* (Mooncake): `input_tokens` tokens made from `hash_ids`, one id per
  `Workload.hash_block_tokens` tokens, identical exactly where the ids are.

Causality: a turn starts after the previous turn of its session finished (output and tool calls),
`think_s` later, and after everything in `after`: `"S"` (session S finished) or `"S#k"` (turn k of
S finished). The dependencies must form a DAG; `validate()` checks it. Times are seconds of the
recorded trace (the replayer divides them by its speedup); token counts are the trace's (the
replayer divides them by its token scale, see `scaled`).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace

SEP = "#"


@dataclass(frozen=True)
class ToolCall:
    name: str
    duration_s: float
    start_s: float = 0.0  # after the turn's output ended; a turn's tool calls may overlap
    predicted_s: float | None = None  # what the caller tells the scheduler the call will take (None: nothing)


@dataclass(frozen=True)
class Turn:
    output_tokens: int
    new_tokens: int = 0
    reuse_tokens: int | None = None
    hash_ids: tuple[int, ...] = ()
    input_tokens: int = 0  # hash-based turns: the prompt length
    content_key: str | None = None  # turns with the same key get the same new tokens (all-gather)
    tools: tuple[ToolCall, ...] = ()
    think_s: float = 0.0
    after: tuple[str, ...] = ()
    label: str | None = None  # "first" | "later"; None: by position in the session

    @property
    def hash_based(self) -> bool:
        return bool(self.hash_ids)

    def tool_time_s(self) -> float:
        """Wall time of this turn's tool calls (they may overlap)."""
        return max((t.start_s + t.duration_s for t in self.tools), default=0.0)


@dataclass(frozen=True)
class Session:
    id: str
    turns: tuple[Turn, ...]
    arrival_s: float = 0.0
    agent: str = ""
    tenant: str = ""
    prefix: str | None = None
    after: tuple[str, ...] = ()  # the first turn's dependencies, besides its own `after`
    critical: bool = False  # on its job's critical path (told to the scheduler when the session opens)

    def deps(self, index: int) -> tuple[str, ...]:
        """Cross-session dependencies of turn `index`."""
        own = self.turns[index].after
        return (*self.after, *own) if index == 0 else own

    def is_first(self, index: int) -> bool:
        label = self.turns[index].label
        return label == "first" if label is not None else index == 0


@dataclass(frozen=True)
class Workload:
    name: str
    sessions: tuple[Session, ...]
    source: str = ""
    hash_block_tokens: int = 512
    prefixes: Mapping[str, int] = field(default_factory=dict)  # shared prefix id -> tokens

    @property
    def num_turns(self) -> int:
        return sum(len(s.turns) for s in self.sessions)

    def by_id(self) -> dict[str, Session]:
        return {s.id: s for s in self.sessions}

    def validate(self) -> Workload:
        """Raise ValueError unless ids are unique, references resolve, lengths make sense and the
        dependencies form a DAG. Returns self."""
        by_id: dict[str, Session] = {}
        for s in self.sessions:
            _check_session(s, self.prefixes, by_id)
            by_id[s.id] = s
        for s in self.sessions:
            for i, turn in enumerate(s.turns):
                _check_turn(s.id, i, turn)
                _check_deps(s, i, by_id)
        order = topological_turns(self)
        if len(order) != self.num_turns:
            raise ValueError("turn dependencies contain a cycle")
        return self


def _check_session(s: Session, prefixes: Mapping[str, int], seen: Mapping[str, Session]) -> None:
    """`s` alone: a unique id, turns, a valid arrival time, a known prefix."""
    if not s.id or SEP in s.id:
        raise ValueError(f"session id must be non-empty without {SEP!r}: {s.id!r}")
    if s.id in seen:
        raise ValueError(f"duplicate session id {s.id!r}")
    if not s.turns:
        raise ValueError(f"session {s.id!r} has no turns")
    if s.arrival_s < 0 or not math.isfinite(s.arrival_s):
        raise ValueError(f"session {s.id!r}: arrival_s must be finite and >= 0")
    if s.prefix is not None and s.prefix not in prefixes:
        raise ValueError(f"session {s.id!r}: unknown prefix {s.prefix!r}")


def _check_deps(s: Session, i: int, by_id: Mapping[str, Session]) -> None:
    """Turn `i` of `s` depends only on sessions and turns that exist."""
    for ref in s.deps(i):
        target, index = parse_ref(ref)
        if target not in by_id:
            raise ValueError(f"{s.id}{SEP}{i}: depends on unknown session {target!r}")
        if index is not None and not 0 <= index < len(by_id[target].turns):
            raise ValueError(f"{s.id}{SEP}{i}: depends on missing turn {ref!r}")


def _check_turn(session_id: str, i: int, turn: Turn) -> None:
    where = f"{session_id}{SEP}{i}"
    if turn.output_tokens < 1:
        raise ValueError(f"{where}: output_tokens must be >= 1")
    if turn.hash_based:
        if turn.input_tokens < 1:
            raise ValueError(f"{where}: a hash-based turn needs input_tokens >= 1")
    elif turn.new_tokens < 1:
        raise ValueError(f"{where}: new_tokens must be >= 1 (a turn sends a message)")
    if turn.reuse_tokens is not None and turn.reuse_tokens < 0:
        raise ValueError(f"{where}: reuse_tokens must be >= 0")
    if turn.think_s < 0 or any(t.duration_s < 0 or t.start_s < 0 for t in turn.tools):
        raise ValueError(f"{where}: think and tool times must be >= 0")
    if any(t.predicted_s is not None and t.predicted_s <= 0 for t in turn.tools):
        raise ValueError(f"{where}: a tool's predicted_s must be > 0 (None: no prediction)")


def parse_ref(ref: str) -> tuple[str, int | None]:
    """`"S"` -> (S, None): the whole session; `"S#3"` -> (S, 3): that turn."""
    session, sep, index = ref.rpartition(SEP)
    if sep and index.isdigit():
        return session, int(index)
    return ref, None


def turn_prerequisites(sessions: Mapping[str, Session], session: Session, index: int) -> list[tuple[str, int]]:
    """The turns (session id, index) that must finish before `session`'s turn `index` starts;
    `sessions` maps ids to sessions (a reference to a missing session is left out)."""
    needs = [(session.id, index - 1)] if index > 0 else []
    for ref in session.deps(index):
        target, turn = parse_ref(ref)
        if target in sessions:
            needs.append((target, turn if turn is not None else len(sessions[target].turns) - 1))
    return needs


def topological_turns(workload: Workload) -> list[tuple[str, int]]:
    """Turns in an order that respects every dependency (Kahn); shorter than all turns on a cycle."""
    by_id = workload.by_id()
    waiting: dict[tuple[str, int], int] = {}
    dependants: dict[tuple[str, int], list[tuple[str, int]]] = {}
    for s in workload.sessions:
        for i in range(len(s.turns)):
            needs = turn_prerequisites(by_id, s, i)
            waiting[(s.id, i)] = len(needs)
            for need in needs:
                dependants.setdefault(need, []).append((s.id, i))
    ready = [t for t, n in waiting.items() if n == 0]
    order = []
    while ready:
        turn = ready.pop()
        order.append(turn)
        for d in dependants.get(turn, ()):
            waiting[d] -= 1
            if waiting[d] == 0:
                ready.append(d)
    return order


def subset(workload: Workload, max_sessions: int | None = None, arrival_before_s: float | None = None) -> Workload:
    """The first sessions by arrival (file order on ties): at most `max_sessions`, arriving before
    `arrival_before_s`. Sessions that depend on a dropped one are dropped too."""
    ordered = sorted(workload.sessions, key=lambda s: s.arrival_s)  # stable
    if arrival_before_s is not None:
        ordered = [s for s in ordered if s.arrival_s < arrival_before_s]
    if max_sessions is not None:
        ordered = ordered[:max_sessions]
    kept = {s.id for s in ordered}
    changed = True
    while changed:
        changed = False
        for s in ordered:
            if s.id in kept and any(parse_ref(r)[0] not in kept for i in range(len(s.turns)) for r in s.deps(i)):
                kept.discard(s.id)
                changed = True
    return replace(workload, sessions=tuple(s for s in ordered if s.id in kept))


def scaled(workload: Workload, token_scale: int, min_output_tokens: int = 2) -> Workload:
    """Every token count divided by `token_scale` (new tokens rounded up, reused tokens down,
    outputs to at least `min_output_tokens`, so TPOT stays measurable). Hash blocks shrink by the
    same factor, so which tokens are shared does not change."""
    if token_scale < 1:
        raise ValueError(f"token_scale must be >= 1, got {token_scale}")
    if workload.hash_block_tokens % token_scale:
        raise ValueError(f"token_scale {token_scale} must divide the hash block size {workload.hash_block_tokens}")
    if token_scale == 1:
        return workload

    def turn(t: Turn) -> Turn:
        return replace(
            t,
            output_tokens=max(min_output_tokens, round(t.output_tokens / token_scale)),
            new_tokens=math.ceil(t.new_tokens / token_scale),
            reuse_tokens=None if t.reuse_tokens is None else t.reuse_tokens // token_scale,
            input_tokens=math.ceil(t.input_tokens / token_scale),
        )

    sessions = tuple(replace(s, turns=tuple(turn(t) for t in s.turns)) for s in workload.sessions)
    return replace(
        workload,
        sessions=sessions,
        hash_block_tokens=workload.hash_block_tokens // token_scale,
        prefixes={k: v // token_scale for k, v in workload.prefixes.items()},
    )


def components(workload: Workload) -> list[list[Session]]:
    """Sessions grouped into jobs: connected by dependencies (a conversation, an agent team), in
    order of their first arrival. Closed-loop replay keeps a number of jobs in flight."""
    parent = {s.id: s.id for s in workload.sessions}

    def root(x: str) -> str:
        while parent[x] != x:
            parent[x] = parent[parent[x]]
            x = parent[x]
        return x

    for s in workload.sessions:
        for i in range(len(s.turns)):
            for ref in s.deps(i):
                target = parse_ref(ref)[0]
                if target in parent:
                    parent[root(s.id)] = root(target)
    groups: dict[str, list[Session]] = {}
    for s in workload.sessions:
        groups.setdefault(root(s.id), []).append(s)
    return sorted(groups.values(), key=lambda g: min(s.arrival_s for s in g))


def trace_seconds(sessions: Iterable[Session]) -> float:
    """Latest arrival: how long the recorded arrivals span."""
    return max((s.arrival_s for s in sessions), default=0.0)
