"""EngineClients: the scheduler's calls to prefill and decode engines, with errors made domain errors.

One channel per engine address, opened on first use and kept: gRPC channels reconnect on their
own, and a turn must not pay a TCP and HTTP/2 handshake. The turn orchestration sees only
`EngineUnavailable` (the engine is gone: route elsewhere), `ValueError` (the request is bad) or
`RetryableError` (the engine is busy), never a gRPC status, so a fake in tests can stand in.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Sequence

import grpc

from agentserve.common.errors import RetryableError
from agentserve.common.server import GRPC_OPTIONS
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
        self._channels: dict[str, grpc.aio.Channel] = {}
        self._retired: list[grpc.aio.Channel] = []

    def _channel(self, address: str) -> grpc.aio.Channel:
        channel = self._channels.get(address)
        if channel is None:
            channel = self._channels[address] = grpc.aio.insecure_channel(address, options=GRPC_OPTIONS)
        return channel

    async def prefill(
        self, address: str, request: prefill_pb2.PrefillRequest, metadata: Metadata
    ) -> prefill_pb2.PrefillResponse:
        stub = prefill_pb2_grpc.PrefillStub(self._channel(address))
        try:
            return await stub.Prefill(request, metadata=metadata)
        except grpc.aio.AioRpcError as exc:
            raise translate(exc, address) from None

    async def generate(
        self, address: str, request: decode_pb2.GenerateRequest, metadata: Metadata
    ) -> AsyncIterator[decode_pb2.GenerateChunk]:
        """Stream the decode engine's chunks; closing this generator cancels the call."""
        call = decode_pb2_grpc.DecodeStub(self._channel(address)).Generate(request, metadata=metadata)
        try:
            async for chunk in call:
                yield chunk
        except grpc.aio.AioRpcError as exc:
            raise translate(exc, address) from None
        finally:
            call.cancel()

    def forget(self, address: str) -> None:
        """Stop using the channel to a failed engine. A channel in reconnect backoff fails new calls
        fast for up to minutes, so an engine restarted on the same address gets a fresh channel;
        the old one is left to calls still on it and closed with the rest."""
        channel = self._channels.pop(address, None)
        if channel is not None:
            self._retired.append(channel)

    async def close(self) -> None:
        channels = [*self._channels.values(), *self._retired]
        self._channels, self._retired = {}, []
        for channel in channels:
            await channel.close()
