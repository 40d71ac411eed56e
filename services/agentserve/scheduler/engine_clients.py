"""EngineClients: the scheduler's calls to prefill and decode engines, with errors made domain errors.

One channel per engine address, from a `ChannelCache` (kept, and retired when the engine is found
dead). The turn orchestration sees only
`EngineUnavailable` (the engine is gone: route elsewhere), `ValueError` (the request is bad) or
`RetryableError` (the engine is busy), never a gRPC status, so a fake in tests can stand in.
"""

from __future__ import annotations

from collections.abc import AsyncGenerator, Sequence

import grpc

from agentserve.common.channels import ChannelCache
from agentserve.common.errors import RetryableError
from agentserve.contracts import EngineUnavailable, GenerateChunk, GenerateRequest, PrefillRequest, PrefillResult
from agentserve.convert import (
    generate_chunk_from_proto,
    generate_request_to_proto,
    prefill_request_to_proto,
    prefill_result_from_proto,
)
from agentserve.v1 import decode_pb2_grpc, prefill_pb2_grpc

Metadata = Sequence[tuple[str, str]]

# Codes that mean the engine, not the request, failed: dead, unreachable or restarting.
ENGINE_GONE = {grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.UNKNOWN, grpc.StatusCode.CANCELLED}
BAD_REQUEST = {grpc.StatusCode.INVALID_ARGUMENT, grpc.StatusCode.OUT_OF_RANGE, grpc.StatusCode.FAILED_PRECONDITION}


def translate(exc: grpc.aio.AioRpcError, address: str) -> Exception:
    code = exc.code()
    if code in BAD_REQUEST:
        return ValueError(exc.details() or code.name)
    if code in ENGINE_GONE:
        return EngineUnavailable(address, f"{code.name}: {exc.details()}")
    if code is grpc.StatusCode.RESOURCE_EXHAUSTED:
        return RetryableError(f"engine at {address} is full: {exc.details()}")
    return RuntimeError(f"engine at {address}: {code.name}: {exc.details()}")


class EngineClients:
    def __init__(self) -> None:
        self._channels = ChannelCache()

    async def prefill(self, address: str, request: PrefillRequest, metadata: Metadata) -> PrefillResult:
        stub = prefill_pb2_grpc.PrefillStub(self._channels.get(address))
        try:
            return prefill_result_from_proto(await stub.Prefill(prefill_request_to_proto(request), metadata=metadata))
        except grpc.aio.AioRpcError as exc:
            raise translate(exc, address) from None

    async def generate(
        self, address: str, request: GenerateRequest, metadata: Metadata
    ) -> AsyncGenerator[GenerateChunk, None]:
        """Stream the decode engine's chunks; closing this generator cancels the call."""
        call = decode_pb2_grpc.DecodeStub(self._channels.get(address)).Generate(
            generate_request_to_proto(request), metadata=metadata
        )
        try:
            async for chunk in call:
                converted = generate_chunk_from_proto(chunk)
                if converted.finished:
                    # The engine ends the stream right after its final chunk. Reading that end now
                    # completes the call, and its client span with it: a call cancelled instead
                    # leaves the span open until the garbage collector closes it, seconds later,
                    # which the trace would show as the turn's latency.
                    async for _ in call:
                        pass
                yield converted
        except grpc.aio.AioRpcError as exc:
            raise translate(exc, address) from None
        finally:
            call.cancel()

    def forget(self, address: str) -> None:
        """Stop using the channel to a failed engine: one restarted on the same address gets a fresh one."""
        self._channels.forget(address)

    async def close(self) -> None:
        await self._channels.close()
