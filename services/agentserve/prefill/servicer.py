"""PrefillServicer: protobuf in, `PrefillWorker` does the work, protobuf out."""

from __future__ import annotations

from agentserve.convert import prefill_request_from_proto, prefill_result_to_proto
from agentserve.prefill.worker import PrefillWorker
from agentserve.v1 import prefill_pb2, prefill_pb2_grpc


class PrefillServicer(prefill_pb2_grpc.PrefillServicer):
    def __init__(self, worker: PrefillWorker):
        self.worker = worker

    async def Prefill(self, request: prefill_pb2.PrefillRequest, context) -> prefill_pb2.PrefillResponse:
        return prefill_result_to_proto(await self.worker.prefill(prefill_request_from_proto(request)))
