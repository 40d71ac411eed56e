"""EngineClients against engines that hang (real gRPC on loopback): a decode stream whose engine
is dropped, or that goes silent past the stall bound, and a prefill past its deadline fail as
EngineUnavailable within their bounds, and the engine's side of the call is cancelled."""

from __future__ import annotations

import asyncio
import time

import grpc
import pytest

from agentserve.contracts import EngineUnavailable, GenerateRequest, PrefillRequest, SamplingParams
from agentserve.scheduler.engine_clients import EngineClients
from agentserve.v1 import decode_pb2, decode_pb2_grpc, prefill_pb2_grpc

pytestmark = pytest.mark.integration

BOUND_S = 0.3


class HangingDecode(decode_pb2_grpc.DecodeServicer):
    def __init__(self) -> None:
        self.cancelled = asyncio.Event()

    async def Generate(self, request, context):

        yield decode_pb2.GenerateChunk(token_ids=[7])
        try:
            await asyncio.sleep(60)  # as a SIGSTOPped engine: nothing more
        except asyncio.CancelledError:
            self.cancelled.set()
            raise


class HangingPrefill(prefill_pb2_grpc.PrefillServicer):
    async def Prefill(self, request, context):
        await asyncio.sleep(60)


def test_silent_decode_streams_and_slow_prefills_fail_within_their_bounds() -> None:
    async def main():
        server = grpc.aio.server()
        decode = HangingDecode()
        decode_pb2_grpc.add_DecodeServicer_to_server(decode, server)
        prefill_pb2_grpc.add_PrefillServicer_to_server(HangingPrefill(), server)
        address = f"127.0.0.1:{server.add_insecure_port('127.0.0.1:0')}"
        await server.start()
        clients = EngineClients(stall_timeout_s=BOUND_S, prefill_timeout_s=BOUND_S)
        sampling = SamplingParams(max_tokens=4)
        try:
            chunks, started = [], time.monotonic()
            with pytest.raises(EngineUnavailable) as stalled:
                async for chunk in clients.generate(address, GenerateRequest("r", "s", "", [1, 2], 2, sampling), ()):
                    chunks.append(chunk.token_ids)
            stall_s = time.monotonic() - started
            await asyncio.wait_for(decode.cancelled.wait(), 5)
            started = time.monotonic()
            with pytest.raises(EngineUnavailable) as late:
                await clients.prefill(address, PrefillRequest("r", "s", "", [1, 2], sampling), ())
            prefill_s = time.monotonic() - started
        finally:
            await clients.close()
            await server.stop(0)
        return chunks, stalled.value, stall_s, late.value, prefill_s

    chunks, stalled, stall_s, late, prefill_s = asyncio.run(main())
    assert chunks == [[7]]
    assert stalled.address.startswith("127.0.0.1:") and "sent nothing for 0.3 s" in stalled.detail
    assert late.detail.startswith("DEADLINE_EXCEEDED")
    assert BOUND_S <= stall_s < BOUND_S + 2 and BOUND_S <= prefill_s < BOUND_S + 2


def test_a_decode_stream_past_its_deadline_fails_and_is_cancelled_on_the_engine() -> None:
    async def main():
        server = grpc.aio.server()
        decode = HangingDecode()
        decode_pb2_grpc.add_DecodeServicer_to_server(decode, server)
        address = f"127.0.0.1:{server.add_insecure_port('127.0.0.1:0')}"
        await server.start()
        clients = EngineClients(decode_timeout_s=BOUND_S)  # no stall bound, the engine stays alive
        request = GenerateRequest("r", "s", "", [1, 2], 2, SamplingParams(max_tokens=4))
        chunks, started = [], time.monotonic()
        try:
            with pytest.raises(EngineUnavailable) as late:
                async for chunk in clients.generate(address, request, ()):
                    chunks.append(chunk.token_ids)
            waited_s = time.monotonic() - started
            await asyncio.wait_for(decode.cancelled.wait(), 5)
        finally:
            await clients.close()
            await server.stop(0)
        return chunks, late.value, waited_s

    chunks, late, waited_s = asyncio.run(main())
    assert chunks == [[7]]
    assert late.detail.startswith("DEADLINE_EXCEEDED")
    assert BOUND_S <= waited_s < BOUND_S + 2


def test_a_stream_is_cancelled_once_its_engine_is_no_longer_alive_and_kept_while_it_is() -> None:
    alive = {"flag": True}

    async def main():
        server = grpc.aio.server()
        decode = HangingDecode()
        decode_pb2_grpc.add_DecodeServicer_to_server(decode, server)
        address = f"127.0.0.1:{server.add_insecure_port('127.0.0.1:0')}"
        await server.start()
        clients = EngineClients(decode_alive=lambda a: a == address and alive["flag"])
        request = GenerateRequest("r", "s", "", [1, 2], 2, SamplingParams(max_tokens=4))
        asyncio.get_running_loop().call_later(1.6, alive.update, {"flag": False})  # heartbeats stop
        started = time.monotonic()
        try:
            with pytest.raises(EngineUnavailable) as dropped:
                async for _ in clients.generate(address, request, ()):
                    pass
            waited_s = time.monotonic() - started
            await asyncio.wait_for(decode.cancelled.wait(), 5)
        finally:
            await clients.close()
            await server.stop(0)
        return dropped.value, waited_s

    dropped, waited_s = asyncio.run(main())
    assert dropped.detail == "dropped (no heartbeat) while streaming; stream cancelled"
    assert 1.6 <= waited_s < 1.6 + 1.0  # kept while alive (no stall bound), cancelled within a poll after


def test_a_prefill_is_cancelled_once_its_engine_is_no_longer_alive() -> None:
    alive = {"flag": True}

    async def main():
        server = grpc.aio.server()
        prefill_pb2_grpc.add_PrefillServicer_to_server(HangingPrefill(), server)
        address = f"127.0.0.1:{server.add_insecure_port('127.0.0.1:0')}"
        await server.start()
        clients = EngineClients(prefill_alive=lambda a: a == address and alive["flag"])
        asyncio.get_running_loop().call_later(1.1, alive.update, {"flag": False})
        started = time.monotonic()
        try:
            with pytest.raises(EngineUnavailable) as dropped:
                await clients.prefill(address, PrefillRequest("r", "s", "", [1, 2], SamplingParams(max_tokens=4)), ())
            return dropped.value, time.monotonic() - started
        finally:
            await clients.close()
            await server.stop(0)

    dropped, waited_s = asyncio.run(main())
    assert dropped.detail == "dropped (no heartbeat) while prefilling; call cancelled"
    assert 1.1 <= waited_s < 1.1 + 1.0
