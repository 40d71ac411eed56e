"""A decode engine (one GPU) in virtual time: continuous batching over a KV pool.

A handed-off turn joins when its context and output fit in the pool (arrival order; a turn that
does not fit waits, and so do the ones behind it). While any turn is running the GPU steps: a
step takes `ComputeCost.decode_step_s` of the running contexts (the weights plus every running
sequence's KV read at the stated HBM efficiency) and gives each running turn one token. A turn that
has its last token leaves, and its KV is dropped (DualPath's regime: the store keeps the session's
context between turns). Turns that join while a step runs start with the next one.
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Callable

from agentserve.costmodel.timing import ComputeCost
from agentserve.sim.events import EventLoop
from agentserve.sim.turn import SimTurn


class DecodeEngine:
    def __init__(
        self,
        engine_id: str,
        loop: EventLoop,
        cost: ComputeCost,
        pool_blocks: int,
        block_size: int,
        on_done: Callable[[SimTurn], None],
    ) -> None:
        self.engine_id = engine_id
        self.loop = loop
        self.cost = cost
        self.pool_blocks = pool_blocks
        self.block_size = block_size
        self.on_done = on_done
        self.pool_taken = 0
        self.busy_s = 0.0
        self.steps = 0
        self.expected = 0  # turns placed here whose handoff has not arrived
        self._waiting: deque[SimTurn] = deque()
        self._running: list[SimTurn] = []
        self._stepping = False

    @property
    def running(self) -> int:
        return len(self._running)

    @property
    def waiting(self) -> int:
        return len(self._waiting) + self.expected

    @property
    def pool_waiting(self) -> int:
        """Turns handed off here that wait for room in the pool."""
        return len(self._waiting)

    def expect(self) -> None:
        """A turn was placed here (it counts in the load the router sees until it arrives)."""
        self.expected += 1

    def admit(self, turn: SimTurn) -> None:
        """The turn's handoff arrived: decode its remaining tokens."""
        self.expected -= 1
        self._waiting.append(turn)
        self._join()
        self._step()

    def _blocks(self, turn: SimTurn) -> int:
        need = math.ceil((turn.prompt_tokens + turn.output_tokens) / self.block_size)
        return min(self.pool_blocks, need)

    def _join(self) -> None:
        while self._waiting and self.pool_taken + self._blocks(self._waiting[0]) <= self.pool_blocks:
            turn = self._waiting.popleft()
            self.pool_taken += self._blocks(turn)
            if turn.emitted >= turn.output_tokens:
                self._finish(turn)
            else:
                self._running.append(turn)

    def _step(self) -> None:
        if self._stepping or not self._running:
            return
        batch = list(self._running)
        step_s = self.cost.decode_step_s([t.prompt_tokens + t.emitted for t in batch])
        self._stepping = True
        self.busy_s += step_s
        self.loop.after(step_s, lambda: self._stepped(batch))

    def _stepped(self, batch: list[SimTurn], steps: int = 1) -> None:
        """`batch` has decoded `steps` more tokens each: finished turns leave, waiting ones join."""
        self._stepping = False
        self.steps += steps
        now = self.loop.now()
        for turn in batch:
            turn.emitted += steps
            turn.last_token_s = now
            if turn.emitted >= turn.output_tokens:
                self._running.remove(turn)
                self._finish(turn)
        self._join()
        self._step()

    def _finish(self, turn: SimTurn) -> None:
        self.pool_taken -= self._blocks(turn)
        turn.done_s = self.loop.now()
        if turn.last_token_s is None:
            turn.last_token_s = turn.first_token_s
        self.on_done(turn)
