"""A decode engine frozen (SIGSTOP) mid-turn: once its heartbeats are missed the scheduler drops it
and cancels its stream, instead of holding the turn until the engine resumes; the turn ends within
that bound (finished on the other engine, or RetryableError once tokens streamed) and the session's
next turn runs on the other engine."""

from __future__ import annotations

import signal
import time

import pytest

from agentserve.sdk import Client, RetryableError
from tests.support.cluster import local_cluster

pytestmark = pytest.mark.integration

ENGINE_TIMEOUT_S = 5.0  # the scheduler's default engine_timeout_ms: no heartbeat this long = dropped


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    with local_cluster(tmp_path_factory, "stall", decoders=2) as running:
        yield running


def test_a_frozen_decode_engine_does_not_hold_its_turns(cluster):
    decoders = [p for p in cluster.procs if p.name.startswith("decode")]
    with Client(f"127.0.0.1:{cluster.ports.scheduler}") as client, client.open_session(tenant="stall") as session:
        session.turn(token_ids=list(range(5, 70)), max_tokens=8, ignore_eos=True).result()
        chunks = iter(session.turn(token_ids=list(range(100, 140)), max_tokens=2000, ignore_eos=True))
        first = next(chunks)
        assert first.metadata is not None
        victim = next(p for p in decoders if str(p.grpc_port) in first.metadata.decode_engine)
        victim.popen.send_signal(signal.SIGSTOP)
        frozen_at = time.monotonic()
        tokens, gaps, last = list(first.token_ids), [], frozen_at
        try:
            for chunk in chunks:
                gaps.append(time.monotonic() - last)
                last = time.monotonic()
                tokens += chunk.token_ids
            assert len(tokens) == 2000  # moved before it streamed: finished on the other engine
        except RetryableError as exc:
            assert "failed mid-turn; retry the turn" in str(exc)
            gaps.append(time.monotonic() - last)
        # Chunks already in flight may arrive at once; after that, nothing waits on the frozen engine
        # longer than its heartbeat timeout (plus a prefill on the other engine when the turn moved).
        longest_wait_s = max(gaps)
        try:
            started = time.monotonic()
            after = session.turn(token_ids=[9, 10, 11], max_tokens=5, ignore_eos=True).result()
            next_s = time.monotonic() - started
        finally:
            victim.popen.send_signal(signal.SIGCONT)
    assert longest_wait_s < ENGINE_TIMEOUT_S + 10, longest_wait_s
    assert len(after.token_ids) == 5 and str(victim.grpc_port) not in after.metadata.decode_engine
    assert next_s < 15.0, next_s  # no wait on the frozen engine: it is out of routing
