"""The decode engine process."""

from __future__ import annotations

import grpc

from agentserve.contracts import Role
from agentserve.decode.servicer import DecodeServicer
from agentserve.decode.worker import DecodeWorker
from agentserve.engine_service.base import EngineService
from agentserve.v1 import decode_pb2, decode_pb2_grpc


class DecodeService(EngineService):
    role = Role.DECODE

    def add_to_server(self, server: grpc.aio.Server) -> list[str]:
        decode_pb2_grpc.add_DecodeServicer_to_server(DecodeServicer(DecodeWorker(self.engine, self.mover)), server)
        return [decode_pb2.DESCRIPTOR.services_by_name["Decode"].full_name]
