"""Prefill policies: least-loaded, and DualPath's read-queue (alpha) / unfinished-token (beta) rule."""

from __future__ import annotations

import pytest

from agentserve.contracts import Role
from agentserve.scheduler.prefill_policy import DualPathPrefill, LeastLoadedPrefill, make_prefill_policy
from tests.unit.scheduler.fakes import loaded_engine

pytestmark = pytest.mark.unit


def prefill(engine_id: str, queue_ms: float = 0.0, tokens: int = 0):
    # 1000 bytes queued on a 1 MB/s snic drain in 1 ms.
    return loaded_engine(engine_id, Role.PREFILL, snic_queue=round(queue_ms * 1000), tokens=tokens)


def pick(policy, *engines):
    choice = policy.pick(list(engines))
    return choice.engine.engine_id, choice.reason


def test_short_read_queue_engines_first_then_fewest_unfinished_tokens() -> None:
    policy = DualPathPrefill(alpha_ms=10, beta=1.5)
    # p0 has the fewest tokens but a long read queue; of the short-queue engines p2 has fewer tokens.
    engines = prefill("p0", queue_ms=50, tokens=100), prefill("p1", queue_ms=10, tokens=400), prefill("p2", 2, 300)
    assert pick(policy, *engines) == ("p2", "short-read-queue")
    # alpha is inclusive: a queue of 10 ms on a 10 ms threshold is short, on 9.9 ms it is not.
    assert pick(policy, engines[1]) == ("p1", "short-read-queue")
    assert pick(DualPathPrefill(alpha_ms=9.9, beta=1.5), engines[1]) == ("p1", "no-short-queue")


def test_an_overloaded_engine_is_never_chosen_even_with_the_shortest_read_queue() -> None:
    # Mean 400 tokens, beta 1.5: above 600 is overloaded. p0's queue is short, but it is overloaded.
    policy = DualPathPrefill(alpha_ms=10, beta=1.5)
    engines = prefill("p0", 0, 700), prefill("p1", 30, 250), prefill("p2", 40, 250)
    assert pick(policy, *engines) == ("p1", "no-short-queue")  # tokens tie: the shorter queue wins
    # At beta 2 (limit 800) p0 is no longer overloaded and its short queue wins.
    assert pick(DualPathPrefill(alpha_ms=10, beta=2), *engines) == ("p0", "short-read-queue")


def test_when_no_read_queue_is_short_compute_balance_decides() -> None:
    policy = DualPathPrefill(alpha_ms=1, beta=1.5)
    assert pick(policy, prefill("p0", 5, 90), prefill("p1", 80, 60)) == ("p1", "no-short-queue")


def test_an_idle_cluster_goes_by_engine_id_and_tokens_routed_since_the_heartbeat_count() -> None:
    policy = DualPathPrefill(alpha_ms=1, beta=1.5)
    p0, p1 = prefill("p0"), prefill("p1")
    assert pick(policy, p0, p1) == ("p0", "short-read-queue")
    p0.prefill_planned_tokens = 50  # a turn sent to p0 a moment ago, not yet in any heartbeat
    assert pick(policy, p0, p1) == ("p1", "short-read-queue")


def test_least_loaded_is_fewest_queued_sequences() -> None:
    busy, idle = prefill("p0"), prefill("p1", queue_ms=500, tokens=10**6)
    busy.inflight = 2
    assert pick(LeastLoadedPrefill(), busy, idle) == ("p1", "least-loaded")


def test_names_and_validation() -> None:
    assert isinstance(make_prefill_policy("least-loaded"), LeastLoadedPrefill)
    policy = make_prefill_policy("dualpath", alpha_ms=5, beta=2)
    assert isinstance(policy, DualPathPrefill) and (policy.alpha_ms, policy.beta) == (5, 2)
    with pytest.raises(ValueError, match="prefill_policy must be one of least-loaded, dualpath, got 'random'"):
        make_prefill_policy("random")
    with pytest.raises(ValueError, match="prefill_beta must be >= 1, got 0.5"):
        DualPathPrefill(beta=0.5)
    with pytest.raises(ValueError, match="prefill_alpha_ms must be >= 0"):
        DualPathPrefill(alpha_ms=-1)
    with pytest.raises(ValueError, match="no prefill engine"):
        DualPathPrefill().pick([])


def test_equally_loaded_engines_take_turns_by_the_bytes_their_storage_nics_read_lately() -> None:
    # Same tokens, both queues empty: p1's storage NIC read less lately, so p1 takes the turn.
    p0, p1 = prefill("p0"), prefill("p1")
    p0.snic.recent, p1.snic.recent = 5000.0, 2000.0
    p0.snic.recent_at = p1.snic.recent_at = 100.0
    assert pick(DualPathPrefill(alpha_ms=1, beta=1.5), p0, p1) == ("p1", "short-read-queue")
