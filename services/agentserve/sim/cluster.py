"""SimCluster: the nodes, NICs and engines of a PD cluster, placed by the scheduler's own code.

Placement is `GlobalScheduler.place` over an `EngineRegistry` whose clock is virtual time: the
prefill, relay and path policies read the same `Engine` figures they read in the service (the
heartbeat's report, aged, or the scheduler's own ledger of what it routed, whichever is more), and
each placement's `reserve` counts its work against its engines until its prefill returns, as the
turn runner does. Engines heartbeat every `heartbeat_interval_ms` of the scheduler's config, with
what the simulated engine holds at that instant: queued and running turns, free pool blocks,
unfinished prefill tokens, and the bytes of its own open transfers on its node's storage NIC.
"""

from __future__ import annotations

from collections.abc import Callable

from agentserve.contracts import EngineStatus, NICStatus, Role
from agentserve.scheduler.placement import GlobalScheduler, Placement
from agentserve.scheduler.registry import EngineRegistry
from agentserve.scheduler.router import LeastLoadedRouter
from agentserve.scheduler.sessions import Session
from agentserve.sim.config import SimConfig
from agentserve.sim.decode import DecodeEngine
from agentserve.sim.events import EventLoop
from agentserve.sim.nic import SharedLink
from agentserve.sim.policies import PolicySet
from agentserve.sim.prefill import PrefillEngine, PrefillSettings
from agentserve.sim.turn import SimTurn

GBPS = 1e9 / 8  # bytes per second in one Gbps


class SimCluster:
    decode_engine_type: type[DecodeEngine] = DecodeEngine  # a subclass may step decode its own way

    def __init__(
        self, loop: EventLoop, config: SimConfig, policy: PolicySet, on_turn_done: Callable[[SimTurn], None]
    ) -> None:
        self.loop = loop
        self.config = config
        self.policy = policy
        self.on_turn_done = on_turn_done
        self.cost = config.cost()
        self.block_bytes = config.block_size * config.kv_bytes_per_token
        self.pool_blocks = {"prefill": config.pool_blocks("prefill"), "decode": config.pool_blocks("decode")}
        self.snics: dict[str, SharedLink] = {}
        self.cnics: dict[str, SharedLink] = {}
        self.node_of: dict[str, str] = {}
        self.prefill_settings = PrefillSettings(
            layerwise=policy.layerwise,
            load_order=policy.prefill.load_order,
            layer_groups=config.layer_groups,
            pool_blocks=self.pool_blocks["prefill"],
            block_size=config.block_size,
            kv_bytes_per_token=config.kv_bytes_per_token,
        )
        self.prefills: dict[str, PrefillEngine] = {}
        self.decodes: dict[str, DecodeEngine] = {}
        self.registry = EngineRegistry(policy.scheduler.engine_timeout_ms / 1000, clock=loop.now)
        for role in ("prefill", "decode"):
            engines = config.engines(role)
            for i in range(engines):
                self.add_engine(
                    role, i, min(config.gpus_per_node, engines - i // config.gpus_per_node * config.gpus_per_node)
                )
        self.scheduler = GlobalScheduler(
            self.registry, LeastLoadedRouter(), policy.prefill_policy, policy.relay_policy, policy.path_policy
        )
        self.heartbeat_s = policy.scheduler.heartbeat_interval_ms / 1000
        self.turns_open = 0
        self.bytes_by_path = {"A": 0, "B": 0}
        self._beating = False

    def add_engine(self, role: str, index: int, on_node: int) -> str:
        """Engine `index` of `role` on node `index // gpus_per_node`, registered with the scheduler; the
        node's storage NIC (made with its first engine) carries the static shares of its `on_node`
        engines. Returns the engine's id."""
        n, g = divmod(index, self.config.gpus_per_node)
        node = f"{role}{n}"
        if node not in self.snics:
            self.snics[node] = SharedLink(self.loop, f"{node}/snic", self.config.snic_share_bytes_per_s * on_node)
        engine_id = f"{role}-{n}-{g}"
        self.node_of[engine_id] = node
        self.cnics[engine_id] = SharedLink(self.loop, f"{engine_id}/cnic", self.config.cnic_gbps * GBPS)
        if role == "prefill":
            self.prefills[engine_id] = PrefillEngine(
                engine_id,
                self.loop,
                self.cost,
                self.policy.batching,
                self.prefill_settings,
                self.cnics[engine_id],
                self._prefilled,
                self._handed_off,
            )
        else:
            self.decodes[engine_id] = self.decode_engine_type(
                engine_id, self.loop, self.cost, self.pool_blocks["decode"], self.config.block_size, self._decoded
            )
        self.registry.register(self._status(engine_id))
        return engine_id

    def _status(self, engine_id: str) -> EngineStatus:
        node = self.node_of[engine_id]
        snic_link = self.snics[node]
        snic = NICStatus("snic", snic_link.bytes_per_s * 8 / 1e9, snic_link.queue_bytes_of(engine_id))
        cnic = NICStatus("cnic", self.config.cnic_gbps, self.cnics[engine_id].queue_bytes)
        if engine_id in self.prefills:
            p = self.prefills[engine_id]
            role, running, waiting, taken = Role.PREFILL, 0, p.queued_turns, p.pool_taken
            pool = self.pool_blocks["prefill"]
            unfinished = p.unfinished_tokens
        else:
            d = self.decodes[engine_id]
            role, running, waiting, taken, unfinished = Role.DECODE, d.running, d.waiting, d.pool_taken, 0
            pool = self.pool_blocks["decode"]
        return EngineStatus(
            engine_id=engine_id,
            role=role,
            address=f"{engine_id}:1",
            model_fingerprint=f"sim-{self.config.model}",
            block_size=self.config.block_size,
            model_name=self.config.model,
            running=running,
            waiting=waiting,
            free_kv_blocks=pool - taken,
            total_kv_blocks=pool,
            vocab_size=1,
            max_context=1 << 30,
            nics=(snic, cnic),
            kv_block_bytes=self.block_bytes,
            unfinished_prefill_tokens=unfinished,
        )

    def _heartbeat(self) -> None:
        if not self.turns_open:
            self._beating = False
            return
        for engine_id in (*self.prefills, *self.decodes):
            self.registry.heartbeat(self._status(engine_id))
        self.loop.after(self.heartbeat_s, self._heartbeat)

    def submit(self, turn: SimTurn, session: Session) -> None:
        """Place `turn` as the scheduler does and send it to its prefill engine."""
        self.turns_open += 1
        if not self._beating:  # idle since the last beat: report now, as registration would
            self._beating = True
            self._heartbeat()
        full_blocks, tail = divmod(turn.cached_tokens, self.config.block_size)
        if not self.policy.scheduler.tail_blocks:
            tail = 0
        placement = self.scheduler.place(session, turn.prompt_tokens, full_blocks, tail_tokens=tail)
        turn.placement = placement
        turn.reservation.enter_context(placement.reserve(self.registry, self.block_bytes))
        turn.reservation.enter_context(self.registry.track(placement.prefill))
        self.decodes[placement.decode.engine_id].expect()
        self.prefills[placement.prefill.engine_id].submit(turn, self._ways(turn, placement))

    def _ways(self, turn: SimTurn, placement: Placement) -> list[tuple[SharedLink, str, float]]:
        a_bytes = (placement.hit_blocks - placement.relay_blocks) * self.block_bytes
        prefill_id = placement.prefill.engine_id
        ways = [(self.snics[self.node_of[prefill_id]], prefill_id, float(a_bytes))]
        turn.read_bytes = placement.hit_blocks * self.block_bytes
        self.bytes_by_path["A"] += a_bytes
        if placement.relay is not None:
            relay_id = placement.relay.engine_id
            b_bytes = placement.relay_store_blocks * self.block_bytes
            turn.relayed_bytes = placement.relay_blocks * self.block_bytes
            self.bytes_by_path["B"] += turn.relayed_bytes
            if relay_id == placement.decode.engine_id:
                turn.relayed_to_decode_bytes = turn.relayed_bytes
            ways.append((self.snics[self.node_of[relay_id]], relay_id, float(b_bytes)))
        return ways

    def _prefilled(self, turn: SimTurn) -> None:
        turn.reservation.close()  # the prefill returned: its ledger entries and in-flight count end

    def _handed_off(self, turn: SimTurn) -> None:
        assert turn.placement is not None
        self.decodes[turn.placement.decode.engine_id].admit(turn)

    def _decoded(self, turn: SimTurn) -> None:
        self.turns_open -= 1
        self.on_turn_done(turn)
