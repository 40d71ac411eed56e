"""EngineClients: the scheduler's calls to prefill and decode engines, with errors made domain errors.

One channel per engine address, from a `ChannelCache` (kept, and retired when the engine is found
dead). The turn orchestration sees only
`EngineUnavailable` (the engine is gone: route elsewhere), `ValueError` (the request is bad) or
`RetryableError` (the engine is busy), never a gRPC status, so a fake in tests can stand in.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Sequence

import grpc

from agentserve.common.channels import ChannelCache
from agentserve.common.errors import RetryableError
from agentserve.engine.sampling import SamplingParams
from agentserve.v1 import common_pb2, decode_pb2, decode_pb2_grpc, prefill_pb2, prefill_pb2_grpc

Metadata = Sequence[tuple[str, str]]

# Codes that mean the engine, not the request, failed: dead, unreachable or restarting.
ENGINE_GONE = {grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.UNKNOWN, grpc.StatusCode.CANCELLED}
BAD_REQUEST = {grpc.StatusCode.INVALID_ARGUMENT, grpc.StatusCode.OUT_OF_RANGE, grpc.StatusCode.FAILED_PRECONDITION}


class EngineUnavailable(ConnectionError):
    """A call to an engine failed because of the engine; the turn may move to another one."""

    def __init__(self, address: str, detail: str) -> None:
        super().__init__(f"engine at {address} failed: {detail}")
        self.address = address
        self.detail = detail


def sampling_to_proto(params: SamplingParams, max_tokens: int | None = None) -> common_pb2.SamplingParams:
    """The engines' sampling message; `max_tokens` overrides the budget (decode gets what is left).
    Stop token ids are not sent: the scheduler applies them to the stream itself."""
    return common_pb2.SamplingParams(
        max_tokens=params.max_tokens if max_tokens is None else max_tokens,
        temperature=params.temperature,
        top_p=params.top_p,
        seed=params.seed,
        ignore_eos=params.ignore_eos,
    )


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

    async def prefill(
        self, address: str, request: prefill_pb2.PrefillRequest, metadata: Metadata
    ) -> prefill_pb2.PrefillResponse:
        stub = prefill_pb2_grpc.PrefillStub(self._channels.get(address))
        try:
            return await stub.Prefill(request, metadata=metadata)
        except grpc.aio.AioRpcError as exc:
            raise translate(exc, address) from None

    async def generate(
        self, address: str, request: decode_pb2.GenerateRequest, metadata: Metadata
    ) -> AsyncIterator[decode_pb2.GenerateChunk]:
        """Stream the decode engine's chunks; closing this generator cancels the call."""
        call = decode_pb2_grpc.DecodeStub(self._channels.get(address)).Generate(request, metadata=metadata)
        try:
            async for chunk in call:
                yield chunk
        except grpc.aio.AioRpcError as exc:
            raise translate(exc, address) from None
        finally:
            call.cancel()

    def forget(self, address: str) -> None:
        """Stop using the channel to a failed engine: one restarted on the same address gets a fresh one."""
        self._channels.forget(address)

    async def close(self) -> None:
        await self._channels.close()
