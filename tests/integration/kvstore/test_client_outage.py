"""KVStoreClient against a store that dies and comes back on the same port (real gRPC on loopback):
calls while it is down fail fast as `store_down`, the first call after its restart succeeds (no
reconnect backoff inherited), and a hung store costs a call at most its deadline."""

from __future__ import annotations

import asyncio
import time

import grpc
import pytest

from agentserve.kvstore.client import KVStoreClient, store_down
from agentserve.v1 import kvstore_pb2, kvstore_pb2_grpc

pytestmark = pytest.mark.integration


class Stored(kvstore_pb2_grpc.KVStoreServicer):
    """Every id is stored; `hang` makes lookups never answer (a SIGSTOPped store)."""

    def __init__(self, hang: bool = False) -> None:
        self.hang = hang

    async def Lookup(self, request, context):
        if self.hang:
            await asyncio.sleep(60)
        return kvstore_pb2.LookupResponse(prefix_blocks=len(request.block_ids))


async def serve(port: int, servicer: Stored) -> tuple[grpc.aio.Server, int]:
    server = grpc.aio.server()
    kvstore_pb2_grpc.add_KVStoreServicer_to_server(servicer, server)
    port = server.add_insecure_port(f"127.0.0.1:{port}")
    await server.start()
    return server, port


IDS = [bytes([i]) * 16 for i in range(3)]


def test_calls_fail_fast_while_the_store_is_down_and_succeed_once_it_is_back() -> None:
    async def main():
        server, port = await serve(0, Stored())
        async with KVStoreClient(f"127.0.0.1:{port}", timeout_s=5) as client:
            assert await client.lookup(IDS) == 3
            await server.stop(None)
            for _ in range(4):  # each failed attempt would grow a shared subchannel's backoff
                started = time.monotonic()
                with pytest.raises(grpc.aio.AioRpcError) as down:
                    await client.lookup(IDS)
                assert store_down(down.value) and down.value.code() is grpc.StatusCode.UNAVAILABLE
                assert time.monotonic() - started < 1.0
            server, _ = await serve(port, Stored())
            try:
                assert await client.lookup(IDS) == 3  # at once: no wait_for_ready, no retry
            finally:
                await server.stop(None)

    asyncio.run(main())


def test_a_hung_store_costs_a_call_its_deadline() -> None:
    async def main():
        server, port = await serve(0, Stored(hang=True))
        try:
            async with KVStoreClient(f"127.0.0.1:{port}", timeout_s=0.3) as client:
                started = time.monotonic()
                with pytest.raises(grpc.aio.AioRpcError) as hung:
                    await client.lookup(IDS)
                assert store_down(hung.value) and hung.value.code() is grpc.StatusCode.DEADLINE_EXCEEDED
                assert time.monotonic() - started < 2.0
        finally:
            await server.stop(None)

    asyncio.run(main())
