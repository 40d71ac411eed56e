"""EngineService: what prefill and decode processes share (model, engine thread, store client,
registration, warm-up, drain). Role-specific servicers plug in through `add_to_server`.

Drain (scale-in): on SIGTERM, or when the scheduler's heartbeat reply asks (an operator's
`agentserve drain`), the engine reports `draining`, so the scheduler places no new turn on it; it
keeps serving the calls it gets for the turns it has, deregisters once idle (`Registrar`), and the
process exits 0. A drain that outlasts `drain_timeout_s` stops the engine anyway. The sessions'
KV is in the store already: a decode engine persists each turn's blocks before its last token.
"""

from __future__ import annotations

import asyncio
import logging
import socket
from pathlib import Path

from agentserve.common.internal_tls import internal_tls
from agentserve.common.netutil import advertise_host
from agentserve.common.server import Service
from agentserve.contracts import EngineStatus, Role, SamplingParams
from agentserve.engine.async_engine import AsyncEngine
from agentserve.engine.default_model import ensure_default_model
from agentserve.engine.emulated_model import EmulatedModel
from agentserve.engine.engine import LLMEngine
from agentserve.engine.local_compute import measure_local_compute
from agentserve.engine_service.compute_metrics import register_forward_metrics
from agentserve.engine_service.config import EngineServiceConfig
from agentserve.engine_service.expert_metrics import record_expert_load, register_expert_metrics
from agentserve.engine_service.kv_moves import KVMover
from agentserve.engine_service.peer_allowlist import PeerAllowList
from agentserve.engine_service.pool_metrics import register_pool_metrics
from agentserve.engine_service.registration import Registrar
from agentserve.fabric.metrics import nic_status, register_nic_metrics
from agentserve.fabric.profiles import ScaledProfile, SnicGroup, load_profile
from agentserve.kvstore.sharded import ShardedKVStoreClient

log = logging.getLogger(__name__)


class EngineService(Service):
    role: Role  # set by the prefill and decode services

    def __init__(self, config: EngineServiceConfig):
        self.config = config
        model_dir = config.model_dir or str(ensure_default_model())
        engine = LLMEngine.for_config(  # emulated: no weights loaded, model_dir gives the token ids
            model_dir,
            config.engine_config(),
        )
        self.engine = AsyncEngine(engine)
        self.address = f"{advertise_host(config.advertise_host)}:{config.grpc_port}"
        self.engine_id = config.engine_id or f"{self.role.value}-{self.address}"
        # One address or several (`kvstore:50052` resolving to every replica): blocks are placed
        # by consistent hashing of their id, so every engine finds a block on the same instance.
        self.tls = internal_tls(config.internal_tls_dir)
        self.kvstore = ShardedKVStoreClient(
            config.kvstore_address, timeout_s=config.kvstore_timeout_ms / 1000 or None, tls=self.tls
        )
        self.fabric = self._scaled_profile(engine, model_dir)
        group = SnicGroup(config.snic_group, config.snic_group_engines) if config.snic_group else None
        self.nics = self.fabric.nics(self.role.value, group)
        register_nic_metrics(self.nics.values())
        register_pool_metrics(engine.blocks.stats)
        register_forward_metrics(engine.runner)
        register_expert_metrics(engine.model)
        if config.record_expert_load:
            record_expert_load(engine.model, config.record_expert_load)
        self.mover = KVMover(self.engine, self.engine_id, self.kvstore, config.kvstore_address, self.nics, self.tls)
        self.registrar: Registrar | None = None
        # The peers this engine may dial (handoff, relay): the decode engines the scheduler registered.
        self.peer_allowlist = PeerAllowList(self._registered_peers)
        self.model_dir = model_dir
        self._draining = False
        self._drain_task: asyncio.Task | None = None  # referenced, so the loop cannot drop it
        self._drained = asyncio.Event()  # the drain ended: the process may exit

    def _scaled_profile(self, engine: LLMEngine, model_dir: str) -> ScaledProfile:
        """The hardware profile scaled to this machine's compute: it gives this engine's snic and cnic."""
        profile = load_profile(self.config.fabric_profile)  # ValueError names the profiles on offer
        if isinstance(engine.model, EmulatedModel):
            return profile.dilated(engine.model.emulation.time_dilation)
        model = engine.model_config
        kv_bytes = 2 * model.num_hidden_layers * model.num_key_value_heads * model.head_dim * engine.dtype.itemsize
        tokens_per_s = self.config.fabric_prefill_tokens_per_s
        if profile.target is not None and tokens_per_s == 0:
            tokens_per_s = measure_local_compute(Path(model_dir), self.config.dtype).prefill_tokens_per_s
        return profile.scaled(kv_bytes, tokens_per_s or 1.0)

    def status(self) -> EngineStatus:
        engine = self.engine.engine
        load = self.engine.load()
        return EngineStatus(
            engine_id=self.engine_id,
            role=self.role,
            address=self.address,
            model_name=self.config.model_name,
            model_fingerprint=engine.fingerprint,
            block_size=engine.block_size,
            running=load["running"],
            waiting=load["waiting"],
            free_kv_blocks=load["free_kv_blocks"],
            total_kv_blocks=load["total_kv_blocks"],
            vocab_size=engine.model_config.vocab_size,
            max_context=engine.model_config.max_position_embeddings,
            nics=nic_status(self.nics.values()),
            kv_block_bytes=self.mover.charge.per_block,
            draining=self._draining,
        )

    def idle(self) -> bool:
        """Nothing runs or waits here: no sequence in the batch or its queue, no prefill accepted."""
        status = self.status()
        return status.running == 0 and status.waiting == 0 and status.unfinished_prefill_tokens == 0

    def begin_drain(self) -> None:
        """Take no new turns, finish these, deregister, end (`ended`). Idempotent."""
        if self._draining:
            return
        self._draining = True
        log.info("%s %s draining: finishing its turns, then deregistering", self.role.value, self.engine_id)
        self._drain_task = asyncio.get_running_loop().create_task(self._finish_drain(), name="drain")

    async def _finish_drain(self) -> None:
        if self.registrar is not None:
            self.registrar.wake()
            try:
                await asyncio.wait_for(self.registrar.deregistered.wait(), self.config.drain_timeout_s)
            except TimeoutError:
                status = self.status()
                log.warning(
                    "drain did not finish in %.0f s (%d running, %d waiting); stopping anyway",
                    self.config.drain_timeout_s,
                    status.running,
                    status.waiting,
                )
        self._drained.set()

    async def drain(self) -> None:
        self.begin_drain()
        await self._drained.wait()

    async def ended(self) -> None:
        await self._drained.wait()

    async def start(self) -> None:
        # Logged here, not in __init__: the server configures logging after building the service.
        engine = self.engine.engine
        log.info(
            "%s %s serving %s from %s: %d layers, %s (fingerprint %s)",
            self.role.value,
            self.engine_id,
            self.config.model_name,
            self.model_dir,
            engine.model_config.num_hidden_layers,
            self.config.dtype,
            engine.fingerprint,
        )
        if isinstance(engine.model, EmulatedModel):
            emulated = engine.model
            log.info(
                "emulated compute: %s on %s, %d KV blocks of %d target bytes (%d materialised), time dilation %.3g",
                emulated.cost.model.key,
                emulated.cost.gpu.key,
                emulated.num_blocks,
                emulated.geometry.declared_block_bytes,
                self.mover.block_bytes,
                emulated.emulation.time_dilation,
            )
        nics = self.fabric.engines[self.role.value]
        log.info(
            "fabric profile %s (time dilation %.3g): snic %.4g Gbps %.3g ms, cnic %.4g Gbps %.3g ms",
            self.fabric.profile.name,
            self.fabric.time_dilation,
            nics.snic.gbps,
            nics.snic.latency_ms,
            nics.cnic.gbps,
            nics.cnic.latency_ms,
        )
        self.engine.start()

    async def warmup(self) -> None:
        # A real generation through the engine thread: SERVING means the model really runs.
        tokens = [
            event.token_id
            async for event in self.engine.generate(
                [1, 2, 3, 4, 5, 6, 7, 8], SamplingParams(max_tokens=2, ignore_eos=True)
            )
        ]
        log.info("warm-up generated %s on %s", tokens, socket.gethostname())
        self.registrar = Registrar(
            self.config.scheduler_address,
            self.status,
            self.config.heartbeat_interval_ms / 1000,
            self.tls,
            on_peers=self.peer_allowlist.update,
            on_drain=self.begin_drain,
            idle=self.idle,
        )
        self.registrar.start()

    async def _registered_peers(self) -> list[str]:
        """The registered peers, asked of the scheduler now (none before this engine registers)."""
        return [] if self.registrar is None else await self.registrar.peers_now()

    async def stop(self) -> None:
        if self.registrar is not None:
            await self.registrar.stop()
        await self.mover.close()
        await self.kvstore.close()
        self.engine.stop()
