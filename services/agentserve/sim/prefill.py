"""A prefill engine (one GPU) in virtual time: pool budget, loads, compute batches, handoff.

- Pool: without layerwise a turn takes its prompt's blocks from the engine's KV pool before its
  load (in arrival order, `prefill/pool_budget.py`) and returns them once its handoff is sent;
  with layerwise the pool stages about one layer of the cached KV per prefill and is not what
  limits it.
- Loads: path A reads over the prefill node's storage NIC, path B over the relay's node's storage
  NIC (the relay's compute-NIC leg runs at a GPU's 400 Gbps, above any share of a node's storage
  NIC, and is not modelled as a link). `load_order=concurrent` opens every load at once (they
  share the NIC); `fifo` gives each way in to one load at a time (`prefill/load_lanes.py`).
  Layerwise loads move in `layer_groups` chunks, one after another on each way.
- Compute: the GPU takes the oldest ready turns (turn order's rank, then submission) that the
  batch policy fits (`engine/prefill_batch.py`: fcfs or compute-quota). Ready is: loaded in full
  (no layerwise), or the first layer group delivered (layerwise). A batch takes the summed
  `ComputeCost.prefill_s` of its turns; layerwise, each layer group takes 1/groups of it and starts
  when the previous group is done and every member's chunk of that group has arrived, the GPU held
  meanwhile (as the emulated runner holds its thread while a streamed layer arrives).
- Handoff: the prompt's KV, less the blocks the decode engine relayed itself, over the prefill
  GPU's compute NIC, then the decode engine admits the turn.
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field

from agentserve.costmodel.timing import ComputeCost
from agentserve.engine.prefill_batch import PrefillBatchPolicy, select
from agentserve.prefill.pool_budget import PoolLedger
from agentserve.sim.events import EventLoop
from agentserve.sim.nic import SharedLink
from agentserve.sim.turn import SimTurn


@dataclass
class _Load:
    """One turn's store reads: each way (link, owner, bytes) moves its bytes in `groups` equal
    chunks, one after another; chunk g has arrived when every way has delivered it."""

    turn: SimTurn
    ways: list[tuple[SharedLink, str, float]]  # (storage link, owner engine id, bytes)
    groups: int
    arrived: int = 0  # leading chunks whose every way has arrived
    done: list[int] = field(default_factory=list)  # chunk -> ways that delivered it


@dataclass(frozen=True)
class PrefillSettings:
    layerwise: bool
    load_order: str  # concurrent | fifo
    layer_groups: int
    pool_blocks: int
    block_size: int
    kv_bytes_per_token: int


class PrefillEngine:
    def __init__(
        self,
        engine_id: str,
        loop: EventLoop,
        cost: ComputeCost,
        batching: PrefillBatchPolicy,
        settings: PrefillSettings,
        cnic: SharedLink,
        on_prefilled: Callable[[SimTurn], None],
        on_handed_off: Callable[[SimTurn], None],
    ) -> None:
        self.engine_id = engine_id
        self.loop = loop
        self.cost = cost
        self.batching = batching
        self.settings = settings
        self.cnic = cnic
        self.on_prefilled = on_prefilled
        self.on_handed_off = on_handed_off
        self.pool = PoolLedger(settings.pool_blocks)
        self.busy_s = 0.0
        self._budget_wait: deque[tuple[SimTurn, list[tuple[SharedLink, str, float]]]] = deque()
        self._loads: dict[int, _Load] = {}  # by turn seq
        self._waiting: list[SimTurn] = []  # submitted, not yet computing
        self._lanes: dict[tuple[str, str], deque[Callable[[], None]]] = {}  # fifo: (link, owner) -> queued reads
        self._lane_busy: set[tuple[str, str]] = set()
        self._computing = False
        self._group_waiting: Callable[[], None] | None = None  # a batch's next layer group, awaiting its chunks
        self.unfinished_tokens = 0

    # -- what the heartbeat reports --
    @property
    def queued_turns(self) -> int:
        return len(self._waiting) + len(self._budget_wait)

    def submit(self, turn: SimTurn, ways: list[tuple[SharedLink, str, float]]) -> None:
        """Take `turn`, whose store reads are `ways` (link, owner, bytes): load, compute, hand off."""
        self.unfinished_tokens += turn.new_tokens
        self._budget_wait.append((turn, ways))
        self._admit()

    @property
    def pool_taken(self) -> int:
        return self.pool.taken

    def _blocks(self, turn: SimTurn) -> int:
        return self.pool.need(math.ceil(turn.prompt_tokens / self.settings.block_size))

    def _admit(self) -> None:
        while self._budget_wait:
            turn, ways = self._budget_wait[0]
            need = 0 if self.settings.layerwise else self._blocks(turn)
            if not self.pool.fits(need):
                return
            self._budget_wait.popleft()
            self.pool.take(need)
            self._start_load(turn, ways)

    def _start_load(self, turn: SimTurn, ways: list[tuple[SharedLink, str, float]]) -> None:
        groups = self.settings.layer_groups if self.settings.layerwise else 1
        ways = [w for w in ways if w[2] > 0]
        load = _Load(turn, ways, groups, done=[0] * groups)
        self._loads[turn.seq] = load
        self._waiting.append(turn)
        if not ways:
            load.arrived = groups
            self._try_compute()
            return
        for way in ways:
            self._send_chunk(load, way, 0)

    def _send_chunk(self, load: _Load, way: tuple[SharedLink, str, float], chunk: int) -> None:
        link, owner, nbytes = way

        def arrived() -> None:
            if chunk + 1 < load.groups:
                self._send_chunk(load, way, chunk + 1)
            elif self.settings.load_order == "fifo":
                self._lane_done((link.name, owner))
            load.done[chunk] += 1
            before = load.arrived
            while load.arrived < load.groups and load.done[load.arrived] == len(load.ways):
                load.arrived += 1
            if load.arrived > before:
                self._on_chunk()

        def start() -> None:
            link.send(nbytes / load.groups, arrived, owner)

        if self.settings.load_order == "fifo" and chunk == 0:
            self._lane_take((link.name, owner), start)
        else:
            start()

    def _lane_take(self, lane: tuple[str, str], start: Callable[[], None]) -> None:
        if lane in self._lane_busy:
            self._lanes.setdefault(lane, deque()).append(start)
            return
        self._lane_busy.add(lane)
        start()

    def _lane_done(self, lane: tuple[str, str]) -> None:
        queued = self._lanes.get(lane)
        if queued:
            queued.popleft()()
        else:
            self._lane_busy.discard(lane)

    def _on_chunk(self) -> None:
        if self._group_waiting is not None:
            self._group_waiting()
        else:
            self._try_compute()

    def _ready(self, turn: SimTurn) -> bool:
        load = self._loads[turn.seq]
        return load.arrived >= (1 if self.settings.layerwise else load.groups)

    def _try_compute(self) -> None:
        if self._computing:
            return
        ready = sorted((t for t in self._waiting if self._ready(t)), key=lambda t: t.order_key)
        if not ready:
            return
        taken = max(1, select(self.batching, [(t.new_tokens, t.cached_tokens) for t in ready]))
        batch = ready[:taken]
        for turn in batch:
            self._waiting.remove(turn)
        self._computing = True
        compute_s = sum(self.cost.prefill_s(t.cached_tokens, t.new_tokens) for t in batch)
        groups = self.settings.layer_groups if self.settings.layerwise else 1
        self._run_group(batch, 0, groups, compute_s / groups, self.loop.now())

    def _run_group(self, batch: list[SimTurn], group: int, groups: int, group_s: float, started: float) -> None:
        if group == groups:
            self._group_waiting = None
            self.busy_s += self.loop.now() - started
            self._computing = False
            for turn in batch:
                self._prefilled(turn)
            self._try_compute()
            return
        if any(self._loads[t.seq].arrived <= group for t in batch):
            self._group_waiting = lambda: self._run_group(batch, group, groups, group_s, started)
            return
        self._group_waiting = None
        self.loop.after(group_s, lambda: self._run_group(batch, group + 1, groups, group_s, started))

    def _prefilled(self, turn: SimTurn) -> None:
        del self._loads[turn.seq]
        self.unfinished_tokens -= turn.new_tokens
        turn.first_token_s = self.loop.now()
        turn.emitted = 1
        self.on_prefilled(turn)
        handoff = (turn.prompt_tokens * self.settings.kv_bytes_per_token) - turn.relayed_to_decode_bytes
        self.cnic.send(max(0.0, handoff), lambda: self._handed_off(turn), self.engine_id)

    def _handed_off(self, turn: SimTurn) -> None:
        if not self.settings.layerwise:
            self.pool.give_back(self._blocks(turn))
            self._admit()
        self.on_handed_off(turn)
