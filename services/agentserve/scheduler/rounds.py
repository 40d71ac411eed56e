"""RoundGroups: a round's compatible turns go to the engine together, to one prefill engine.

In an all-gather round every agent's prompt holds the same shared blocks. The engine computes a
block's master once and reuses it for every prompt that holds it, but only for prompts it sees:
so the scheduler sends a round's turns to one prefill engine (the round's, pinned when its first
turn is placed), and holds the first turn of a round back for `window_s` so the others that arrive
meanwhile reach the engine with it, as one batch whose shared blocks are computed once.

Compatible means: same tenant (block ids and masters never cross tenants), same round, same reuse
policy (an exact turn never waits: it reuses nothing). A turn arriving after its round's group
closed opens a new group, which still goes to the round's pinned engine.
"""

from __future__ import annotations

import asyncio
from collections import OrderedDict
from dataclasses import dataclass, field

from agentserve.contracts.segments import ReusePolicy

DEFAULT_WINDOW_S = 0.02
MAX_ROUNDS = 4096  # rounds whose pinned engine is remembered (least recently used forgotten first)


@dataclass(frozen=True)
class RoundKey:
    tenant: str
    round_index: int
    reuse: ReusePolicy

    @property
    def round(self) -> tuple[str, int]:
        return self.tenant, self.round_index


@dataclass
class RoundGroup:
    key: RoundKey
    members: int = 0
    closed: asyncio.Event = field(default_factory=asyncio.Event)


class RoundGroups:
    def __init__(self, window_s: float = DEFAULT_WINDOW_S, max_rounds: int = MAX_ROUNDS) -> None:
        if not 0 <= window_s < float("inf"):
            raise ValueError(f"round window must be a finite number of seconds >= 0, got {window_s}")
        self.window_s = window_s
        self.max_rounds = max_rounds
        self._open: dict[RoundKey, RoundGroup] = {}
        self._engines: OrderedDict[tuple[str, int], str] = OrderedDict()

    async def join(self, key: RoundKey) -> RoundGroup:
        """Join the key's open group (or open one) and return it once it closes: `window_s` after
        its first member joined. Every member of a group returns in the same event-loop turn."""
        group = self._open.get(key)
        if group is None:
            group = RoundGroup(key)
            self._open[key] = group
            asyncio.get_running_loop().call_later(self.window_s, self._close, group)
        group.members += 1
        await group.closed.wait()
        return group

    def _close(self, group: RoundGroup) -> None:
        if self._open.get(group.key) is group:
            del self._open[group.key]
        group.closed.set()

    def engine_for(self, key: RoundKey) -> str | None:
        """The prefill engine the round's earlier turns went to (None: none yet, or forgotten)."""
        engine = self._engines.get(key.round)
        if engine is not None:
            self._engines.move_to_end(key.round)
        return engine

    def placed(self, key: RoundKey, engine_id: str) -> None:
        """The round's turns went to `engine_id`: later ones of the round follow while it lives."""
        self._engines[key.round] = engine_id
        self._engines.move_to_end(key.round)
        while len(self._engines) > self.max_rounds:
            self._engines.popitem(last=False)
