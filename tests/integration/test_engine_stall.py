"""A decode engine frozen (SIGSTOP) mid-turn: once its heartbeats are missed the scheduler drops it
and cancels its stream, instead of holding the turn until the engine resumes; the turn ends within
that bound (finished on the other engine, or RetryableError once tokens streamed) and the session's
next turn runs on the other engine. Resumed (SIGCONT), it registers again and serves turns."""

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
    _assert_rejoins(cluster, victim)


def _assert_rejoins(cluster, victim, timeout_s: float = 60.0) -> None:
    """The resumed engine finds itself unknown at its next heartbeat, registers again, and takes
    turns: of two concurrent turns, the least-loaded router puts one on each decode engine."""
    log = cluster.log_dir / "scheduler.log"
    registered = f"registered decode engine decode-127.0.0.1:{victim.grpc_port}"
    deadline = time.monotonic() + timeout_s
    while log.read_text().count(registered) < 2:
        assert time.monotonic() < deadline, f"decode engine {victim.grpc_port} did not register again"
        time.sleep(0.5)
    time.sleep(3.0)  # a few heartbeats: its load is the resumed engine's, not the frozen one's
    with (
        Client(f"127.0.0.1:{cluster.ports.scheduler}") as client,
        client.open_session(tenant="a") as first,
        client.open_session(tenant="b") as second,
    ):
        long_turn = iter(first.turn(token_ids=list(range(200, 240)), max_tokens=400, ignore_eos=True))
        head = next(long_turn)
        other = second.turn(token_ids=list(range(300, 340)), max_tokens=4, ignore_eos=True).result()
        rest = list(long_turn)
    engines = {head.metadata.decode_engine, other.metadata.decode_engine}
    assert len(engines) == 2 and any(str(victim.grpc_port) in engine for engine in engines), engines
    assert len(head.token_ids) + sum(len(c.token_ids) for c in rest) == 400 and len(other.token_ids) == 4
