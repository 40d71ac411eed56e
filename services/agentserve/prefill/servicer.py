"""PrefillServicer: protobuf in, `PrefillWorker` does the work (counted by `PrefillBacklog`), protobuf out."""

from __future__ import annotations

from typing import Protocol

import grpc

from agentserve.contracts import PrefillRequest, PrefillResult
from agentserve.convert import prefill_request_from_proto, prefill_result_to_proto
from agentserve.v1 import prefill_pb2, prefill_pb2_grpc


class Prefills(Protocol):
    async def prefill(self, request: PrefillRequest) -> PrefillResult: ...


class PrefillServicer(prefill_pb2_grpc.PrefillServicer):
    def __init__(self, worker: Prefills):
        self.worker = worker

    async def Prefill(
        self, request: prefill_pb2.PrefillRequest, context: grpc.aio.ServicerContext
    ) -> prefill_pb2.PrefillResponse:
        return prefill_result_to_proto(await self.worker.prefill(prefill_request_from_proto(request)))
