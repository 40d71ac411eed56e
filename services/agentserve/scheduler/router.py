"""Routing policies: which engine of a role serves a turn.

A policy is a plain object with `pick`, so benchmarks can compare policies in one run and later
ones (cache-aware, DualPath) slot in without touching the turn orchestration.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Protocol

from agentserve.scheduler.registry import Engine

if TYPE_CHECKING:
    from agentserve.scheduler.sessions import Session


class Router(Protocol):
    def pick(self, engines: Sequence[Engine], session: Session | None) -> Engine:
        """Choose one of `engines` (never empty: the caller handles 'no engine') for `session`'s
        turn. Called on the event loop; must not block and must not change the engines."""
        ...


class LeastLoadedRouter:
    """Fewest queued sequences (`Engine.load`), ties broken by engine id so choices are repeatable."""

    def pick(self, engines: Sequence[Engine], session: Session | None) -> Engine:
        if not engines:
            raise ValueError("no engine to pick from")
        return min(engines, key=lambda e: (e.load, e.engine_id))
