"""KV admission: new work is admitted only while the KV it commits fits the decode engines' pools.

Committed demand is the KV the scheduler has promised to serve soon, in full blocks:
- a turn in flight: its history, its new tokens and its `max_tokens`;
- a session that went to a tool: its history, wherever that KV is now (kept in an engine, pinned,
  or parked in the store), from the tool's start until its next turn is admitted (its return) or
  it closes: its owner will be back for it, and admitting work that needs the room would leave
  the return to thrash (evict someone, recompute, evict again).

Beyond `ratio` x the blocks of the live decode engines' pools, a new session or a turn that is
not a committed session's return is refused with `Overloaded` (HTTP 429 / RESOURCE_EXHAUSTED with
Retry-After). A committed session's own turn is always admitted: its demand was counted when it
parked. Check, then act: a refused turn commits nothing.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

from agentserve.common.errors import Overloaded

# When refused, try again after about one turn: demand falls when a turn ends with no tool pending.
KV_RETRY_S = 2.0


@dataclass
class KVCommitment:
    """One admitted turn's blocks, held until `release` (idempotent)."""

    admission: KVAdmission
    session_id: str
    blocks: int
    held: bool = True

    def release(self) -> None:
        if self.held:
            self.held = False
            self.admission._release(self)


class KVAdmission:
    def __init__(self, ratio: float, capacity_blocks: Callable[[], int], retry_after_s: float = KV_RETRY_S) -> None:
        """`ratio` x `capacity_blocks()` (the live decode engines' pools, in blocks) is the bound;
        `ratio` 0 admits everything (the count is still kept, for metrics)."""
        if not 0 <= ratio < math.inf:
            raise ValueError(f"kv_commit_ratio must be a finite number >= 0 (0 = no KV admission), got {ratio}")
        self.ratio = ratio
        self._capacity_blocks = capacity_blocks
        self.retry_after_s = retry_after_s
        self._waiting: dict[str, int] = {}  # session id -> history blocks, for sessions gone to tools
        self._turns: dict[str, int] = {}  # session id -> blocks of its turns in flight
        self.committed = 0

    @property
    def limit(self) -> int | None:
        """The bound in blocks; None when there is none (ratio 0, or no decode engine known yet)."""
        capacity = self._capacity_blocks()
        return math.floor(self.ratio * capacity) if self.ratio and capacity else None

    def check_new_session(self) -> None:
        """Overloaded when committed demand already fills the bound: a new session's first turn could
        only run by taking room promised to others."""
        limit = self.limit
        if limit is not None and self.committed >= limit:
            raise Overloaded(
                f"KV committed to running and tool-waiting sessions ({self.committed} blocks) fills the decode "
                f"engines' pools ({limit} blocks); retry later",
                self.retry_after_s,
            )

    def admit(self, session_id: str, blocks: int) -> KVCommitment:
        """Commit `blocks` for a turn of `session_id`; Overloaded past the bound unless the session's
        own demand is committed already (it waits on a tool: this is its return)."""
        if blocks < 0:
            raise ValueError(f"blocks must be >= 0, got {blocks}")
        returning = self._waiting.get(session_id, 0)
        extra = max(0, blocks - returning)
        limit = self.limit
        if limit is not None and not returning and self.committed + extra > limit:
            raise Overloaded(
                f"this turn needs {blocks} KV blocks; {self.committed} of the decode engines' {limit} are "
                "committed to running and tool-waiting sessions; retry later",
                self.retry_after_s,
            )
        self.committed += extra
        self._waiting.pop(session_id, None)
        self._turns[session_id] = self._turns.get(session_id, 0) + max(blocks, returning)
        return KVCommitment(self, session_id, max(blocks, returning))

    def waiting(self, session_id: str, blocks: int) -> None:
        """`session_id` started waiting on a tool with `blocks` of history (kept committed); a turn
        of it in flight already counts at least as much."""
        if session_id in self._waiting or session_id in self._turns:
            return
        self._waiting[session_id] = blocks
        self.committed += blocks

    def forget(self, session_id: str) -> None:
        """The session closed (or expired): its return will not come."""
        self.committed -= self._waiting.pop(session_id, 0)

    def _release(self, commitment: KVCommitment) -> None:
        self.committed -= commitment.blocks
        left = self._turns[commitment.session_id] - commitment.blocks
        if left:
            self._turns[commitment.session_id] = left
        else:
            del self._turns[commitment.session_id]
