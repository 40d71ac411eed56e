"""The agent trace the peer bench replays: TraceLab's recorded coding-agent sessions (their
prompts, reuse, outputs, tool calls and think times), cut to their first `turns` turns, copied
until there are `sessions` sessions that all start at once, and scaled down by `token_scale`.

Copies of one recorded session share its agent's system prompt (the trace's shared prefix,
warmed before timing) and nothing else: each copy's messages are its own content.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, replace
from pathlib import Path

from agentserve.bench.common.workloads import load_workload
from agentserve.bench.common.workloads.model import Workload, scaled
from agentserve.bench.common.workloads.traces import TRACELAB_ROUNDS


@dataclass(frozen=True)
class PeerWorkloadSpec:
    trace: Path = TRACELAB_ROUNDS
    sessions: int = 32  # concurrent sessions, all arriving at time 0
    turns: int = 4  # first turns of each recorded session
    token_scale: int = 32  # every recorded token count divided by this

    def __post_init__(self) -> None:
        if self.sessions < 1:
            raise ValueError(f"sessions must be >= 1, got {self.sessions}")
        if self.turns < 1:
            raise ValueError(f"turns must be >= 1, got {self.turns}")
        if self.token_scale < 1:
            raise ValueError(f"token_scale must be >= 1, got {self.token_scale}")

    def to_dict(self) -> dict:
        return {
            "trace": str(self.trace),
            "sessions": self.sessions,
            "turns": self.turns,
            "token_scale": self.token_scale,
        }


def copied(workload: Workload, sessions: int, turns: int) -> Workload:
    """`sessions` sessions cycling through `workload`'s, each its first `turns` turns, all arriving
    at 0; copy k of session S is `S-k`."""
    if not workload.sessions:
        raise ValueError(f"{workload.name}: the trace has no sessions")
    if any(s.after or any(t.after for t in s.turns) for s in workload.sessions):
        raise ValueError(f"{workload.name}: sessions with dependencies cannot be copied independently")
    out = []
    for n in range(sessions):
        source = workload.sessions[n % len(workload.sessions)]
        copy = n // len(workload.sessions)
        out.append(replace(source, id=f"{source.id}-{copy}", turns=source.turns[:turns], arrival_s=0.0))
    return replace(workload, sessions=tuple(out)).validate()


def peer_workload(spec: PeerWorkloadSpec) -> Workload:
    return scaled(copied(load_workload(spec.trace, "tracelab"), spec.sessions, spec.turns), spec.token_scale)


def describe(workload: Workload) -> dict:
    """The sizes a reader needs: sessions, turns, and the token counts the replay sends."""
    turns = [t for s in workload.sessions for t in s.turns]
    return {
        "sessions": len(workload.sessions),
        "turns_total": len(turns),
        "shared_prefix_tokens": dict(workload.prefixes),
        "new_tokens_per_turn": _range(t.new_tokens for t in turns),
        "output_tokens_per_turn": _range(t.output_tokens for t in turns),
        "output_tokens_total": sum(t.output_tokens for t in turns),
        "tool_calls": sum(len(t.tools) for t in turns),
        "tool_seconds_per_session": _range(sum(t.tool_time_s() for t in s.turns) for s in workload.sessions),
    }


def _range(values: Iterable[float]) -> dict[str, float]:
    data = list(values)
    return {"min": min(data), "mean": sum(data) / len(data), "max": max(data)}
