"""In-process stand-ins for the engines and the KV store, for TurnRunner tests only.

`FakeEngines` plays a model that always replies `reply` (its first token from prefill, the rest
streamed by decode), and can play dead per address or die after some streamed chunks.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import grpc

from agentserve.contracts import (
    EngineStatus,
    EngineUnavailable,
    GenerateChunk,
    GenerateRequest,
    KVPath,
    NICStatus,
    PrefillRequest,
    PrefillResult,
    Role,
    SamplingParams,
    TokenLogprob,
)
from agentserve.scheduler.registry import Engine
from agentserve.v1 import common_pb2

FINGERPRINT = "fp-test"
BLOCK_SIZE = 4
VOCAB = 8192
MAX_CONTEXT = 512
EOS = 4  # <|im_end|> in the tiny model's tokenizer
BLOCK_BYTES = 100  # what the fake prefill reports per handed-off block


def status(engine_id: str, role: Role, port: int, running: int = 0, waiting: int = 0, **overrides) -> EngineStatus:
    fields = dict(
        engine_id=engine_id,
        role=role,
        address=f"127.0.0.1:{port}",
        model_fingerprint=FINGERPRINT,
        block_size=BLOCK_SIZE,
        running=running,
        waiting=waiting,
        vocab_size=VOCAB,
        max_context=MAX_CONTEXT,
    )
    fields.update(overrides)
    return EngineStatus(**fields)


def loaded_engine(
    engine_id: str,
    role: Role,
    *,
    snic_queue: int = 0,
    cnic_queue: int = 0,
    tokens: int = 0,
    snic_gbps: float = 0.008,
    cnic_gbps: float = 0.008,
    block_bytes: int = 1000,
) -> Engine:
    """A registered engine whose fresh heartbeat reported these queues (bytes) and unfinished prefill
    tokens. 0.008 Gbps is 1 MB/s, so 1000 queued bytes are 1 ms of drain."""
    nics = (NICStatus("snic", snic_gbps, snic_queue), NICStatus("cnic", cnic_gbps, cnic_queue))
    port = 7000 + sum(map(ord, engine_id))
    fields = dict(nics=nics, kv_block_bytes=block_bytes, unfinished_prefill_tokens=tokens)
    return Engine(status(engine_id, role, port, **fields), 100.0, clock=lambda: 100.0)


def engine_proto(engine_id: str = "d9", role: int = common_pb2.ENGINE_ROLE_DECODE, **fields) -> common_pb2.EngineStatus:
    values = dict(
        engine_id=engine_id,
        role=role,
        address="127.0.0.1:7009",
        model_name="agentserve-tiny",
        model_fingerprint="fp-test",
        block_size=4,
        running=1,
        waiting=2,
        vocab_size=8192,
        max_context=512,
    )
    values.update(fields)
    return common_pb2.EngineStatus(**values)


class FakeStore:
    def __init__(self, hits: int = 0, fail: bool = False) -> None:
        self.hits = hits
        self.fail = fail
        self.lookups: list[list[bytes]] = []

    async def lookup(self, block_ids: list[bytes]) -> int:
        self.lookups.append(list(block_ids))
        if self.fail:
            raise ConnectionError("kvstore unreachable")
        return min(self.hits, len(block_ids))


def fake_logprob(token: int, sampling: SamplingParams) -> TokenLogprob | None:
    """A made-up but token-specific logprob, when the request asks for them."""
    if sampling.logprobs is None:
        return None
    return TokenLogprob(token, -token / 1000, tuple((token + i, -(token + i) / 1000) for i in range(sampling.logprobs)))


class FakeEngines:
    def __init__(self, reply: list[int] | None = None) -> None:
        self.reply = reply if reply is not None else [300, 301, 302, EOS]
        self.dead: set[str] = set()  # addresses whose calls fail as unreachable
        self.die_after: dict[str, int] = {}  # decode address -> chunks streamed before it dies
        self.prefill_error: Exception | None = None  # raised by the next prefill call
        self.handoff_fails: set[str] = set()  # decode addresses a prefill cannot hand KV to
        self.prefills: list[tuple[str, PrefillRequest, list]] = []
        self.generates: list[tuple[str, GenerateRequest, list]] = []
        self.cancelled: list[str] = []
        self.forgotten: list[str] = []

    async def prefill(self, address: str, request: PrefillRequest, metadata) -> PrefillResult:
        self.prefills.append((address, request, list(metadata)))
        if self.prefill_error is not None:
            error, self.prefill_error = self.prefill_error, None
            raise error
        if address in self.dead:
            raise EngineUnavailable(address, "UNAVAILABLE: connection refused")
        first = self.reply[0]
        finished = first == EOS or request.sampling.max_tokens == 1
        reason = ("stop" if first == EOS else "length") if finished else ""
        hits, plan = request.store_hit_blocks, request.plan
        relayed = {KVPath.A: 0, KVPath.B: hits, KVPath.SPLIT: min(plan.relay_blocks, hits)}[plan.path]
        handoff = len(request.token_ids) // BLOCK_SIZE
        return PrefillResult(
            first_logprob=fake_logprob(first, request.sampling),
            first_token=first,
            prompt_tokens=len(request.token_ids),
            cached_tokens=request.store_hit_blocks * BLOCK_SIZE,
            finished=finished,
            finish_reason=reason,
            kv_path=request.plan.path,
            engine_cached_tokens=0,
            persisted_blocks=0,
            loaded_blocks=request.store_hit_blocks,
            relayed_blocks=relayed,
            handoff_blocks=handoff,
            handoff_bytes=handoff * BLOCK_BYTES,
            handoff_failed=request.decode_address in self.handoff_fails,
        )

    async def generate(self, address: str, request: GenerateRequest, metadata) -> AsyncIterator[GenerateChunk]:
        self.generates.append((address, request, list(metadata)))
        if address in self.dead:
            raise EngineUnavailable(address, "UNAVAILABLE: connection refused")
        rest = self.reply[1 : 1 + request.sampling.max_tokens]
        try:
            for i, token in enumerate(rest):
                if self.die_after.get(address) == i:
                    raise EngineUnavailable(address, "UNAVAILABLE: socket closed")
                last = i == len(rest) - 1
                reason = ("stop" if token == EOS else "length") if last else ""
                logprob = fake_logprob(token, request.sampling)
                logprobs = [logprob] if logprob is not None else []
                yield GenerateChunk(token_ids=[token], finished=last, finish_reason=reason, logprobs=logprobs)
        except GeneratorExit:
            self.cancelled.append(address)
            raise

    def forget(self, address: str) -> None:
        self.forgotten.append(address)


class FakeContext:
    """The part of a grpc.aio ServicerContext the servicer and the error interceptor use."""

    def __init__(self, metadata: tuple = ()) -> None:
        self.metadata = metadata
        self.code: grpc.StatusCode | None = None
        self.details = ""

    def invocation_metadata(self):
        return self.metadata

    async def abort(self, code: grpc.StatusCode, details: str) -> None:
        self.code, self.details = code, details
        raise grpc.aio.AbortError()


def run(coro):
    return asyncio.run(coro)


async def collect(events) -> list:
    return [event async for event in events]


class DroppingEngines(FakeEngines):
    """Fake engines that also take DropKV (the calls `session_kv=store` makes)."""

    def __init__(self) -> None:
        super().__init__()
        self.drops: list[tuple[str, list[bytes]]] = []

    async def drop_kv(self, address: str, block_ids: list[bytes]) -> int:
        self.drops.append((address, block_ids))
        return len(block_ids)
