"""The prefill engine process."""

from __future__ import annotations

import grpc

from agentserve.contracts import Role
from agentserve.engine_service.base import EngineService
from agentserve.prefill.servicer import PrefillServicer
from agentserve.prefill.worker import PrefillWorker
from agentserve.v1 import prefill_pb2, prefill_pb2_grpc


class PrefillService(EngineService):
    role = Role.PREFILL

    def add_to_server(self, server: grpc.aio.Server) -> list[str]:
        prefill_pb2_grpc.add_PrefillServicer_to_server(PrefillServicer(PrefillWorker(self.engine, self.mover)), server)
        return [prefill_pb2.DESCRIPTOR.services_by_name["Prefill"].full_name]
