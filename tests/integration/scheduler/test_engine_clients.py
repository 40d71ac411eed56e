"""EngineClients' decode stream against a real gRPC server on loopback: its client span ends with it."""

from __future__ import annotations

import asyncio
from contextlib import aclosing

import grpc
import pytest
from opentelemetry.trace import SpanKind

from agentserve.common.netutil import free_port
from agentserve.contracts import GenerateRequest, KVHint, SamplingParams
from agentserve.scheduler.engine_clients import EngineClients
from agentserve.v1 import decode_pb2, decode_pb2_grpc

pytestmark = pytest.mark.integration

GENERATE = "/agentserve.v1.Decode/Generate"


class ThreeTokens(decode_pb2_grpc.DecodeServicer):
    async def Generate(self, request, context):
        for i, token in enumerate((7, 8, 9)):
            yield decode_pb2.GenerateChunk(token_ids=[token], finished=i == 2, finish_reason="length" if i == 2 else "")


def client_spans(spans) -> list:
    return [s for s in spans.get_finished_spans() if s.name == GENERATE and s.kind is SpanKind.CLIENT]


def test_the_generate_call_and_its_client_span_end_when_the_final_chunk_arrives(spans) -> None:
    request = GenerateRequest("r1", "s1", "", [1, 2, 3], 3, SamplingParams(max_tokens=3))

    async def main():
        server = grpc.aio.server()
        decode_pb2_grpc.add_DecodeServicer_to_server(ThreeTokens(), server)
        address = f"127.0.0.1:{free_port()}"
        server.add_insecure_port(address)
        await server.start()
        clients = EngineClients()
        try:
            tokens, ended_at_final = [], None
            # The caller stops at the final chunk and keeps the stream object: nothing is closed
            # or collected yet when the span must already have ended.
            async with aclosing(clients.generate(address, request, [])) as chunks:
                async for chunk in chunks:
                    tokens.extend(chunk.token_ids)
                    if chunk.finished:
                        ended_at_final = len(client_spans(spans))
                        break
            return tokens, ended_at_final
        finally:
            await clients.close()
            await server.stop(0)

    tokens, ended_at_final = asyncio.run(main())
    assert tokens == [7, 8, 9]
    assert ended_at_final == 1


class HoldsTwo(decode_pb2_grpc.DecodeServicer):
    """Holds two blocks; drops whatever it is asked to and loads the rest."""

    async def DropKV(self, request, context):
        return decode_pb2.DropKVResponse(dropped=min(2, len(request.block_ids)))

    async def PrefetchKV(self, request, context):
        return decode_pb2.PrefetchKVResponse(loaded=len(request.block_ids) - 2, held=2)

    async def HintKV(self, request, context):
        self.hinted = (request.HasField("priority"), request.next_use_in_s, request.pin_s)
        return decode_pb2.HintKVResponse(resident=2)


def test_kv_moves_speak_domain_types() -> None:
    async def main():
        server = grpc.aio.server()
        servicer = HoldsTwo()
        decode_pb2_grpc.add_DecodeServicer_to_server(servicer, server)
        address = f"127.0.0.1:{free_port()}"
        server.add_insecure_port(address)
        await server.start()
        clients = EngineClients()
        try:
            ids = [bytes([i]) * 16 for i in range(5)]
            hinted = await clients.hint_kv(address, ids, KVHint(next_use_in_s=3.0, pin_s=2.5))
            return await clients.drop_kv(address, ids), await clients.prefetch_kv(address, ids), hinted, servicer.hinted
        finally:
            await clients.close()
            await server.stop(0)

    # No priority given stays unset on the wire (the engine's policy keeps what it had).
    assert asyncio.run(main()) == (2, (3, 2), 2, (False, 3.0, 2.5))
