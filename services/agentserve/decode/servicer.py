"""DecodeServicer: protobuf in, `DecodeWorker` does the work, protobuf out."""

from __future__ import annotations

from collections.abc import AsyncIterator

import grpc

from agentserve.convert import generate_chunk_to_proto, generate_request_from_proto, kv_hint_from_proto
from agentserve.decode.worker import DecodeWorker
from agentserve.fabric.stream import incoming_transfer
from agentserve.v1 import common_pb2, decode_pb2, decode_pb2_grpc, fabric_pb2


class DecodeServicer(decode_pb2_grpc.DecodeServicer):
    def __init__(self, worker: DecodeWorker):
        self.worker = worker

    async def LoadKV(
        self, request_iterator: AsyncIterator[common_pb2.KVBlock], context: grpc.aio.ServicerContext
    ) -> decode_pb2.LoadKVResponse:
        blocks = []
        # Paced on this engine's cnic as well: the slower (or busier) end sets the rate.
        async with incoming_transfer(self.worker.mover.cnic, context) as transfer:
            async for block in request_iterator:
                await transfer.pace(self.worker.mover.charge.blocks(len(block.data)))
                blocks.append(block.data)
        imported, present = await self.worker.load_kv(blocks)
        return decode_pb2.LoadKVResponse(imported=imported, already_present=present)

    async def Generate(
        self, request: decode_pb2.GenerateRequest, context: grpc.aio.ServicerContext
    ) -> AsyncIterator[decode_pb2.GenerateChunk]:
        async for chunk in self.worker.generate(generate_request_from_proto(request)):
            yield generate_chunk_to_proto(chunk)

    async def RelayKV(
        self, request: decode_pb2.RelayRequest, context: grpc.aio.ServicerContext
    ) -> AsyncIterator[fabric_pb2.FabricChunk]:
        async for chunk in self.worker.relay(list(request.block_ids), request.dst, request.hbm_first):
            yield chunk

    async def Lookup(
        self, request: decode_pb2.HeldBlocksRequest, context: grpc.aio.ServicerContext
    ) -> decode_pb2.HeldBlocksResponse:
        held = await self.worker.held(list(request.block_ids))
        return decode_pb2.HeldBlocksResponse(held=held)

    async def DropKV(
        self, request: decode_pb2.HeldBlocksRequest, context: grpc.aio.ServicerContext
    ) -> decode_pb2.DropKVResponse:
        return decode_pb2.DropKVResponse(dropped=await self.worker.drop_kv(list(request.block_ids)))

    async def PrefetchKV(
        self, request: decode_pb2.HeldBlocksRequest, context: grpc.aio.ServicerContext
    ) -> decode_pb2.PrefetchKVResponse:
        loaded, held = await self.worker.prefetch_kv(list(request.block_ids))
        return decode_pb2.PrefetchKVResponse(loaded=loaded, held=held)

    async def HintKV(
        self, request: decode_pb2.HintKVRequest, context: grpc.aio.ServicerContext
    ) -> decode_pb2.HintKVResponse:
        block_ids, hint = kv_hint_from_proto(request)
        return decode_pb2.HintKVResponse(resident=await self.worker.hint_kv(block_ids, hint))
