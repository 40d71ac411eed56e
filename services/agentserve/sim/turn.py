"""One agent turn as the simulator carries it from submission to its last token."""

from __future__ import annotations

from contextlib import ExitStack
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from agentserve.scheduler.placement import Placement
    from agentserve.sim.agents import Agent


@dataclass
class SimTurn:
    agent: Agent
    index: int
    prompt_tokens: int
    cached_tokens: int  # read from the store (the context's hits, its stored tail included)
    output_tokens: int
    seq: int  # submission order, the tie-break after the turn order's rank
    submitted_s: float
    rank: int = 0  # the turn order's rank (scheduler/turn_order.py)
    placement: Placement | None = None
    reservation: ExitStack = field(default_factory=ExitStack)  # the placement's ledger entries
    read_bytes: int = 0
    relayed_bytes: int = 0  # of `read_bytes`, by path B
    relayed_to_decode_bytes: int = 0  # relayed by the turn's own decode engine, which keeps them
    first_token_s: float | None = None
    last_token_s: float | None = None
    done_s: float | None = None
    emitted: int = 0  # tokens produced so far (the prefill's first one included)

    @property
    def new_tokens(self) -> int:
        """Prompt tokens the prefill computes."""
        return self.prompt_tokens - self.cached_tokens

    @property
    def order_key(self) -> tuple[int, int]:
        return (self.rank, self.seq)
