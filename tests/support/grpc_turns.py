"""Sessions driven turn by turn over the scheduler's gRPC API, recording what each turn reports:
its output tokens, which scheduler ran it (`SERVED_BY`), its metadata (prompt and cached tokens,
engines) and how long it took. For tests of several schedulers behind one entry point, one of which
is killed between two turns."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field

from agentserve.contracts import SamplingParams
from agentserve.engine.engine import LLMEngine
from agentserve.scheduler.forwarding import SERVED_BY
from agentserve.v1 import common_pb2, scheduler_pb2, scheduler_pb2_grpc
from tests.support.tails import cached_history


@dataclass
class Conversation:
    new: list[list[int]]  # each turn's new tokens
    session_id: str = ""
    outputs: list[list[int]] = field(default_factory=list)
    served_by: list[str] = field(default_factory=list)
    metadata: list[scheduler_pb2.TurnMetadata] = field(default_factory=list)
    seconds: list[float] = field(default_factory=list)


def run_turn(stub: scheduler_pb2_grpc.SchedulerStub, conversation: Conversation, index: int, max_tokens: int) -> None:
    """Turn `index` of `conversation` (greedy, `max_tokens` tokens, EOS ignored), recorded on it."""
    sampling = common_pb2.SamplingParams(max_tokens=max_tokens, ignore_eos=True)
    request = scheduler_pb2.TurnRequest(
        session_id=conversation.session_id, token_ids=conversation.new[index], sampling=sampling
    )
    started = time.monotonic()
    call = stub.Turn(request, timeout=120)
    chunks = list(call)
    conversation.outputs.append([token for chunk in chunks for token in chunk.token_ids])
    conversation.seconds.append(time.monotonic() - started)
    conversation.served_by.append(dict(call.initial_metadata())[SERVED_BY])
    conversation.metadata.append(chunks[0].metadata)


def open_sessions(stub: scheduler_pb2_grpc.SchedulerStub, conversations: list[Conversation], tenant: str) -> None:
    """One session per conversation, opened one after another (behind a round-robin balancer, their
    homes alternate between the schedulers)."""
    for conversation in conversations:
        conversation.session_id = stub.OpenSession(scheduler_pb2.OpenSessionRequest(tenant=tenant)).session_id


def run_concurrently(
    stub: scheduler_pb2_grpc.SchedulerStub,
    conversations: list[Conversation],
    max_tokens: int,
    pause_after: int,
    at_pause: Callable[[], None],
) -> None:
    """Every conversation's turns, each conversation in a thread of its own; once all have run
    `pause_after` turns, `at_pause()` runs alone (a scheduler is killed), then the rest."""
    at, resume = threading.Barrier(len(conversations) + 1), threading.Barrier(len(conversations) + 1)

    def run(conversation: Conversation) -> None:
        for index in range(len(conversation.new)):
            if index == pause_after:
                at.wait(timeout=300)
                resume.wait(timeout=300)
            run_turn(stub, conversation, index, max_tokens)

    with ThreadPoolExecutor(len(conversations)) as pool:
        futures = [pool.submit(run, c) for c in conversations]
        at.wait(timeout=300)
        try:
            at_pause()
        finally:
            resume.wait(timeout=300)
        for future in futures:
            future.result(timeout=300)


def assert_recomputed(conversation: Conversation, reference: LLMEngine, max_tokens: int) -> list[int]:
    """Every turn's prompt holds the earlier turns exactly once, its output is `reference`'s full
    recompute of that prompt, and the history's KV was a store hit (its full blocks and stored
    tail). Returns the whole history."""
    params = SamplingParams(max_tokens=max_tokens, ignore_eos=True)
    history: list[int] = []
    for new, output, metadata in zip(conversation.new, conversation.outputs, conversation.metadata, strict=True):
        assert metadata.prompt_tokens == len(history) + len(new)
        assert output == reference.generate(history + new, params).output_token_ids
        assert metadata.cached_tokens == cached_history(len(history))
        history += new + output
    return history
