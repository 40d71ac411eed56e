"""EngineClients: the scheduler's calls to prefill and decode engines, with errors made domain errors.

One channel per engine address, from a `ChannelCache` (kept, and retired when the engine is found
dead). No call waits on a dead engine: a decode stream is cancelled as soon as its engine is no
longer alive (`decode_alive`: its heartbeats stopped, or another call found it gone), or, when
`stall_timeout_s` is set, after that long without a chunk; a prefill likewise once its engine is
dropped (`prefill_alive`) or past its deadline (`prefill_timeout_s`, when set); and every call has a
deadline (a decode stream `decode_timeout_s` as a whole, KV moves `MOVE_TIMEOUT_S`). An engine that hangs
(SIGSTOPped, wedged) thus fails its calls as `EngineUnavailable` instead of holding the turn and its
session until it resumes. A live engine that is only slow (queueing a request for KV room) keeps
its call. The turn orchestration sees only
`EngineUnavailable` (the engine is gone: route elsewhere), `ValueError` (the request is bad) or
`RetryableError` (the engine is busy), never a gRPC status, so a fake in tests can stand in.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncGenerator, Awaitable, Callable, Sequence
from typing import Any, TypeVar

import grpc

from agentserve.common.channels import ChannelCache
from agentserve.common.errors import RetryableError
from agentserve.common.internal_tls import InternalTLS
from agentserve.contracts import (
    EngineUnavailable,
    GenerateChunk,
    GenerateRequest,
    KVHint,
    PrefillRequest,
    PrefillResult,
)
from agentserve.convert import (
    block_ids_to_proto,
    generate_chunk_from_proto,
    generate_request_to_proto,
    kv_hint_to_proto,
    prefill_request_to_proto,
    prefill_result_from_proto,
)
from agentserve.v1 import decode_pb2_grpc, prefill_pb2_grpc

Metadata = Sequence[tuple[str, str]]
# A KV move between tool calls is an optimisation: one stuck this long is abandoned (the turn loads on demand).
MOVE_TIMEOUT_S = 60.0

# Codes that mean the engine, not the request, failed: dead, unreachable, restarting, or too slow
# to answer within the call's deadline.
ENGINE_GONE = {
    grpc.StatusCode.UNAVAILABLE,
    grpc.StatusCode.UNKNOWN,
    grpc.StatusCode.CANCELLED,
    grpc.StatusCode.DEADLINE_EXCEEDED,
}
BAD_REQUEST = {grpc.StatusCode.INVALID_ARGUMENT, grpc.StatusCode.OUT_OF_RANGE, grpc.StatusCode.FAILED_PRECONDITION}


async def _result(call: Awaitable[T]) -> T:
    return await call


def translate(exc: grpc.aio.AioRpcError, address: str) -> Exception:
    code = exc.code()
    if code in BAD_REQUEST:
        return ValueError(exc.details() or code.name)
    if code in ENGINE_GONE:
        return EngineUnavailable(address, f"{code.name}: {exc.details()}")
    if code is grpc.StatusCode.RESOURCE_EXHAUSTED:
        return RetryableError(f"engine at {address} is full: {exc.details()}")
    return RuntimeError(f"engine at {address}: {code.name}: {exc.details()}")


# How often a waiting decode stream checks that its engine is still alive.
T = TypeVar("T")
LIVENESS_POLL_S = 0.5


class EngineClients:
    def __init__(
        self,
        stall_timeout_s: float | None = None,
        prefill_timeout_s: float | None = None,
        decode_alive: Callable[[str], bool] | None = None,
        prefill_alive: Callable[[str], bool] | None = None,
        tls: InternalTLS | None = None,
        decode_timeout_s: float | None = None,
    ) -> None:
        """`stall_timeout_s`: the longest a decode stream may go without a chunk; `prefill_timeout_s`:
        a prefill's deadline (None: no bound); `decode_alive(address)`: whether the decode engine
        there is still alive (the registry's view), checked while a stream waits; `prefill_alive`
        likewise while a prefill runs; `tls`: the internal plane's credentials (None: plain);
        `decode_timeout_s`: a whole decode stream's deadline (None: no bound)."""
        self._channels = ChannelCache(tls)
        self.stall_timeout_s = stall_timeout_s
        self.prefill_timeout_s = prefill_timeout_s
        self.decode_timeout_s = decode_timeout_s
        self.decode_alive = decode_alive
        self.prefill_alive = prefill_alive

    async def prefill(self, address: str, request: PrefillRequest, metadata: Metadata) -> PrefillResult:
        stub = prefill_pb2_grpc.PrefillStub(self._channels.get(address))
        call = stub.Prefill(prefill_request_to_proto(request), metadata=metadata, timeout=self.prefill_timeout_s)
        reply = asyncio.ensure_future(_result(call))
        try:
            while not (await asyncio.wait({reply}, timeout=LIVENESS_POLL_S))[0]:
                if self.prefill_alive is not None and not self.prefill_alive(address):
                    raise EngineUnavailable(address, "dropped (no heartbeat) while prefilling; call cancelled")
            return prefill_result_from_proto(reply.result())
        except grpc.aio.AioRpcError as exc:
            raise translate(exc, address) from None
        finally:
            if not reply.done():
                call.cancel()
                reply.cancel()

    async def generate(
        self, address: str, request: GenerateRequest, metadata: Metadata
    ) -> AsyncGenerator[GenerateChunk, None]:
        """Stream the decode engine's chunks; closing this generator cancels the call."""
        call = decode_pb2_grpc.DecodeStub(self._channels.get(address)).Generate(
            generate_request_to_proto(request), metadata=metadata, timeout=self.decode_timeout_s
        )
        try:
            while (chunk := await self._next(call, address)) is not None:
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

    async def _next(self, call: grpc.aio.UnaryStreamCall, address: str) -> Any:
        """The stream's next message, None at its end; EngineUnavailable once the engine is no longer
        alive or the stall bound passed."""
        read = asyncio.ensure_future(call.read())
        waited = 0.0
        try:
            while True:
                poll = LIVENESS_POLL_S
                if self.stall_timeout_s is not None:
                    poll = min(poll, max(0.0, self.stall_timeout_s - waited))
                done, _ = await asyncio.wait({read}, timeout=poll)
                if done:
                    message = read.result()
                    return None if message is grpc.aio.EOF else message
                waited += poll
                if self.decode_alive is not None and not self.decode_alive(address):
                    raise EngineUnavailable(address, "dropped (no heartbeat) while streaming; stream cancelled")
                if self.stall_timeout_s is not None and waited >= self.stall_timeout_s:
                    raise EngineUnavailable(address, f"sent nothing for {self.stall_timeout_s:g} s; stream cancelled")
        finally:
            if not read.done():
                read.cancel()

    async def drop_kv(self, address: str, block_ids: list[bytes]) -> int:
        """Drop the cached blocks among `block_ids` from the decode engine's pool; how many went."""
        stub = decode_pb2_grpc.DecodeStub(self._channels.get(address))
        try:
            return (await stub.DropKV(block_ids_to_proto(block_ids), timeout=MOVE_TIMEOUT_S)).dropped
        except grpc.aio.AioRpcError as exc:
            raise translate(exc, address) from None

    async def prefetch_kv(self, address: str, block_ids: list[bytes]) -> tuple[int, int]:
        """Have the decode engine read `block_ids` it lacks from the store; (loaded, already held)."""
        stub = decode_pb2_grpc.DecodeStub(self._channels.get(address))
        try:
            response = await stub.PrefetchKV(block_ids_to_proto(block_ids), timeout=MOVE_TIMEOUT_S)
        except grpc.aio.AioRpcError as exc:
            raise translate(exc, address) from None
        return response.loaded, response.held

    async def hint_kv(self, address: str, block_ids: list[bytes], hint: KVHint) -> int:
        """Tell the decode engine what to do with `block_ids` it holds; how many are resident there."""
        stub = decode_pb2_grpc.DecodeStub(self._channels.get(address))
        try:
            return (await stub.HintKV(kv_hint_to_proto(block_ids, hint), timeout=MOVE_TIMEOUT_S)).resident
        except grpc.aio.AioRpcError as exc:
            raise translate(exc, address) from None

    def forget(self, address: str) -> None:
        """Stop using the channel to a failed engine: one restarted on the same address gets a fresh one."""
        self._channels.forget(address)

    async def close(self) -> None:
        await self._channels.close()
