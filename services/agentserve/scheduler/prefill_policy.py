"""Prefill policies: which prefill engine computes a turn (DualPath's first question).

`least-loaded` is the baseline: fewest queued sequences. `dualpath` weighs the two things a prefill
engine can run out of in an agentic, I/O-bound cluster:

- its storage NIC: an engine whose storage read queue drains within `alpha_ms` at the NIC's
  configured rate has a *short* read queue, so a path-A read sent there starts at once;
- its compute: an engine is *overloaded* when its unfinished prefill tokens (tokens left to compute
  of the prefills it accepted and has not returned) exceed `beta` times the mean over the alive
  prefill engines.

Rule: among engines that are not overloaded, those with a short read queue come first; within the
chosen group the fewest unfinished tokens wins, then the shorter read queue, then the storage NIC
that carried fewer read bytes lately (so idle engines take turns and their NICs share path A), then
the engine id.
With `beta >= 1` some engine is always below `beta` times the mean, so the first filter never empties
the set; when no candidate has a short read queue the turn's reads will mostly go by path B anyway,
so compute balance alone decides (fallback `no-short-queue`).

Both figures are the heartbeat's report or what this scheduler routed there since, whichever is
more (`Engine`), so a burst between two heartbeats spreads.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

from agentserve.common.config import check_choice
from agentserve.scheduler.registry import Engine


@dataclass(frozen=True)
class PrefillChoice:
    engine: Engine
    reason: str  # the rule that decided, recorded on the turn's span and in metrics


class PrefillPolicy(Protocol):
    name: str

    def pick(self, engines: Sequence[Engine]) -> PrefillChoice:
        """One of `engines` (alive prefill engines, never empty) for a turn. Called on the event
        loop; must not block and must not change the engines."""
        ...


class LeastLoadedPrefill:
    """The baseline: fewest queued sequences (`Engine.load`), ties by engine id."""

    name = "least-loaded"

    def pick(self, engines: Sequence[Engine]) -> PrefillChoice:
        if not engines:
            raise ValueError("no prefill engine to pick from")
        return PrefillChoice(min(engines, key=lambda e: (e.load, e.engine_id)), "least-loaded")


class DualPathPrefill:
    """Short storage read queue first, then the smallest share of unfinished prefill tokens, never
    an overloaded engine (module docstring)."""

    name = "dualpath"

    def __init__(self, alpha_ms: float = 100.0, beta: float = 1.5) -> None:
        if not alpha_ms >= 0:
            raise ValueError(f"prefill_alpha_ms must be >= 0, got {alpha_ms}")
        if not beta >= 1:
            # Below 1 every engine could be over beta x mean, leaving nothing to pick.
            raise ValueError(f"prefill_beta must be >= 1, got {beta}")
        self.alpha_ms = alpha_ms
        self.beta = beta

    def pick(self, engines: Sequence[Engine]) -> PrefillChoice:
        if not engines:
            raise ValueError("no prefill engine to pick from")
        limit = self.beta * sum(e.unfinished_prefill_tokens for e in engines) / len(engines)
        candidates = [e for e in engines if e.unfinished_prefill_tokens <= limit]
        short = [e for e in candidates if e.queue_s("snic") * 1000 <= self.alpha_ms]
        best = min(
            short or candidates,
            key=lambda e: (e.unfinished_prefill_tokens, e.queue_s("snic"), e.recent_bytes("snic"), e.engine_id),
        )
        return PrefillChoice(best, "short-read-queue" if short else "no-short-queue")


PREFILL_POLICIES: dict[str, type] = {p.name: p for p in (LeastLoadedPrefill, DualPathPrefill)}


def make_prefill_policy(name: str, alpha_ms: float = 100.0, beta: float = 1.5) -> PrefillPolicy:
    """The policy called `name` (least-loaded, dualpath); ValueError names the choices."""
    check_choice("prefill_policy", name, PREFILL_POLICIES)
    if name == DualPathPrefill.name:
        return DualPathPrefill(alpha_ms, beta)
    return LeastLoadedPrefill()
