"""A prefill engine (one GPU) in virtual time: pool budget, loads, compute batches, handoff.

- Pool: without layerwise a turn takes its prompt's blocks from the engine's KV pool before its
  load (in arrival order, `prefill/pool_budget.py`) and returns them once its handoff is sent;
  with layerwise the pool stages about one layer of the cached KV per prefill and is not what
  limits it.
- Loads: path A reads over the prefill node's storage NIC, path B over the relay's node's storage
  NIC (the relay's compute-NIC leg runs at a GPU's 400 Gbps, above any share of a node's storage
  NIC, and is not modelled as a link). `load_order=concurrent` opens every load at once (they
  share the NIC); `fifo` gives each way in to one load at a time (`prefill/load_lanes.py`).
  Each way is one transfer (the NIC's queue counts the whole load, as the emulated NIC's does);
  layerwise, its layer groups arrive as its bytes do, `layer_groups` equal parts in order.
- Compute: the GPU takes the oldest ready turns (turn order's rank, then submission) that the
  batch policy fits (`engine/prefill_batch.py`: fcfs or compute-quota). Ready is: loaded in full;
  layerwise, when no waiting turn is, the first layer group delivered (the engine's
  `_admit_prefills` passes over a prefix still arriving while another needs no wait). A batch
  takes the summed `ComputeCost.prefill_s` of its turns; layerwise, each layer group takes 1/groups of it and starts
  when the previous group is done and every member's part of that group has arrived, the GPU held
  meanwhile (as the emulated runner holds its thread while a streamed layer arrives).
- Handoff: the prompt's KV, less the blocks the decode engine relayed itself, over the prefill
  GPU's compute NIC, then the decode engine admits the turn.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable
from dataclasses import dataclass

from agentserve.costmodel.timing import ComputeCost
from agentserve.engine.prefill_batch import PrefillBatchPolicy, select
from agentserve.prefill.pool_budget import PoolLedger, prompt_hold_blocks
from agentserve.sim.events import EventLoop
from agentserve.sim.nic import SharedLink, Transfer
from agentserve.sim.turn import SimTurn


@dataclass
class _Way:
    """One way a turn's store reads come in: its bytes over one storage link for one engine."""

    link: SharedLink
    owner: str  # the engine whose share of the link it is
    nbytes: float
    transfer: Transfer | None = None  # None until it starts (a fifo lane may hold it back)


@dataclass
class _Load:
    """One turn's store reads, each way streamed in one transfer. Layer group g has arrived when
    every way has moved (g + 1) / groups of its bytes: what the same bytes sent as `groups`
    chunks one after another deliver."""

    turn: SimTurn
    ways: list[_Way]
    groups: int
    full: bool = False  # every byte has arrived
    first_ways: int = 0  # ways that have moved group 0
    done_ways: int = 0  # ways that have moved every byte

    def delivered(self, group: int) -> _Way | None:
        """None if layer group `group` has arrived, else a way that has not delivered it yet."""
        if self.full:
            return None
        for way in self.ways:
            need = way.nbytes * (group + 1) / self.groups
            if way.transfer is None or not way.link.has_moved(way.transfer, need):
                return way
        return None


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
        self._waiting: dict[int, SimTurn] = {}  # by seq: loading or loaded, not yet computing
        self._first: dict[int, SimTurn] = {}  # of those, by seq: layer group 0 has arrived
        self._full: dict[int, SimTurn] = {}  # of those, by seq: all of their KV has arrived
        self._lanes: dict[tuple[str, str], deque[Callable[[], None]]] = {}  # fifo: (link, owner) -> queued reads
        self._lane_busy: set[tuple[str, str]] = set()
        self._computing = False
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
        return self.pool.need(prompt_hold_blocks(turn.prompt_tokens, self.settings.block_size))

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
        load = _Load(turn, [_Way(link, owner, nbytes) for link, owner, nbytes in ways if nbytes > 0], groups)
        self._loads[turn.seq] = load
        self._waiting[turn.seq] = turn
        if not load.ways:
            self._arrived(load, full=True)
            return
        for way in load.ways:
            if self.settings.load_order == "fifo":
                self._lane_take((way.link.name, way.owner), lambda w=way: self._send(load, w))  # type: ignore[misc]
            else:
                self._send(load, way)

    def _send(self, load: _Load, way: _Way) -> None:
        def first() -> None:
            load.first_ways += 1
            if load.first_ways == len(load.ways):
                self._arrived(load, full=False)

        def done() -> None:
            if self.settings.load_order == "fifo":
                self._lane_done((way.link.name, way.owner))
            load.done_ways += 1
            if load.done_ways == len(load.ways):
                self._arrived(load, full=True)

        way.transfer = way.link.send(way.nbytes, done, way.owner)
        if load.groups > 1:
            way.link.when_moved(way.transfer, way.nbytes / load.groups, first)

    def _arrived(self, load: _Load, full: bool) -> None:
        """`load`'s layer group 0 (or, `full`, all of it) has arrived: its turn may be batched (if it
        is not computing already, layerwise)."""
        seq = load.turn.seq
        load.full = load.full or full
        if seq in self._waiting:
            self._first[seq] = load.turn
            if full:
                self._full[seq] = load.turn
        self._try_compute()

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

    def _ready(self) -> list[SimTurn]:
        """The waiting turns a batch may take, as the engine admits them (`LLMEngine._admit_prefills`):
        those whose KV has all arrived; when none has, layerwise, those whose first layer group has
        (a forward over a prefix still arriving holds the GPU, so it is run only when nothing could
        run without waiting)."""
        if self._full or not self.settings.layerwise:
            return list(self._full.values())
        return list(self._first.values())

    def _try_compute(self) -> None:
        if self._computing:
            return
        ready = sorted(self._ready(), key=lambda t: t.order_key)
        if not ready:
            return
        taken = max(1, select(self.batching, [(t.new_tokens, t.cached_tokens) for t in ready]))
        batch = ready[:taken]
        for turn in batch:
            for waiting in (self._waiting, self._first, self._full):
                waiting.pop(turn.seq, None)
        self._computing = True
        compute_s = sum(self.cost.prefill_s(t.cached_tokens, t.new_tokens) for t in batch)
        groups = self.settings.layer_groups if self.settings.layerwise else 1
        self._run_group(batch, 0, groups, compute_s / groups, self.loop.now())

    def _run_group(self, batch: list[SimTurn], group: int, groups: int, group_s: float, started: float) -> None:
        """Layer group `group` of `batch`: computed once every member's KV of it has arrived (the
        GPU held meanwhile), then the next; after the last, the batch's turns are prefilled."""
        if group == groups:
            self.busy_s += self.loop.now() - started
            self._computing = False
            for turn in batch:
                self._prefilled(turn)
            self._try_compute()
            return
        for turn in batch:
            lacking = self._loads[turn.seq].delivered(group)
            if lacking is not None:
                # Watch one way at a time: when it has delivered, the batch is checked again.
                assert lacking.transfer is not None  # a batch member's ways have all started
                need = lacking.nbytes * (group + 1) / groups
                lacking.link.when_moved(
                    lacking.transfer, need, lambda: self._run_group(batch, group, groups, group_s, started)
                )
                return
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
