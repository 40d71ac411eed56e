"""PrefillServicer: protobuf in, `PrefillWorker` does the work, protobuf out."""

from __future__ import annotations

from agentserve.engine_service.protocol import sampling_from_proto
from agentserve.kv.paths import KVPath
from agentserve.prefill.worker import LoadPlan, PrefillResult, PrefillWorker
from agentserve.v1 import prefill_pb2, prefill_pb2_grpc


class PrefillServicer(prefill_pb2_grpc.PrefillServicer):
    def __init__(self, worker: PrefillWorker):
        self.worker = worker

    async def Prefill(self, request: prefill_pb2.PrefillRequest, context) -> prefill_pb2.PrefillResponse:
        result = await self.worker.prefill(
            list(request.token_ids),
            sampling_from_proto(request.sampling),
            tenant=request.tenant,
            store_hit_blocks=request.store_hit_blocks,
            decode_address=request.decode_address,
            plan=load_plan_from_proto(request),
        )
        return response_to_proto(result)


def load_plan_from_proto(request: prefill_pb2.PrefillRequest) -> LoadPlan:
    return LoadPlan(KVPath.from_proto(request.kv_path), request.relay_address, request.relay_blocks)


def response_to_proto(result: PrefillResult) -> prefill_pb2.PrefillResponse:
    fields = dict(result.__dict__, kv_path=result.kv_path.to_proto())
    return prefill_pb2.PrefillResponse(**fields)
