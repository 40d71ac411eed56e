"""The prefill engine process."""

from __future__ import annotations

import dataclasses

import grpc

from agentserve.contracts import EngineStatus, Role
from agentserve.engine_service.base import EngineService
from agentserve.engine_service.config import EngineServiceConfig
from agentserve.prefill.backlog import PrefillBacklog
from agentserve.prefill.config import PrefillConfig
from agentserve.prefill.load_lanes import DEFAULT_LOAD_ORDER
from agentserve.prefill.servicer import PrefillServicer
from agentserve.prefill.worker import PrefillWorker
from agentserve.v1 import prefill_pb2, prefill_pb2_grpc


class PrefillService(EngineService):
    role = Role.PREFILL

    def __init__(self, config: EngineServiceConfig):
        super().__init__(config)
        keep_kv = config.keep_kv if isinstance(config, PrefillConfig) else True
        load_order = config.load_order if isinstance(config, PrefillConfig) else DEFAULT_LOAD_ORDER
        worker = PrefillWorker(
            self.engine,
            self.mover,
            config.layerwise_min_read_kb << 10,
            keep_kv,
            peers=self.peer_allowlist if config.peer_allowlist else None,
            load_order=load_order,
        )
        self.backlog = PrefillBacklog(worker, self.engine.engine.block_size)

    def add_to_server(self, server: grpc.aio.Server) -> list[str]:
        prefill_pb2_grpc.add_PrefillServicer_to_server(PrefillServicer(self.backlog), server)
        return [prefill_pb2.DESCRIPTOR.services_by_name["Prefill"].full_name]

    def status(self) -> EngineStatus:
        return dataclasses.replace(super().status(), unfinished_prefill_tokens=self.backlog.tokens)
