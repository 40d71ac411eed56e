"""Concurrent sessions on one decode engine, as local processes: their turns decode in one batch,
and every greedy reply equals a full recompute of its prompt token for token (the decode engine's
logits for a sequence do not depend on what it is batched with: `engine.decode_attention`)."""

from __future__ import annotations

import random
import time
from concurrent.futures import ThreadPoolExecutor

import pytest

from agentserve.contracts import SamplingParams
from agentserve.sdk import Client

pytestmark = pytest.mark.integration

SESSIONS, TURNS, OUTPUT = 4, 2, 40
GREEDY = SamplingParams(max_tokens=OUTPUT, ignore_eos=True)


@pytest.fixture(scope="module")
def cluster(shared_cluster_one_decode):
    return shared_cluster_one_decode


def session(address: str, seed: int) -> list[dict]:
    """Each turn's prompt, reply, decode engine and client-side [start, end) times."""
    rng = random.Random(seed)
    history: list[int] = []
    turns = []
    with Client(address) as client, client.open_session(tenant=f"s{seed}") as conversation:
        for _ in range(TURNS):
            # Lengths differ per session so the decode batch mixes contexts (and decode splits).
            new = [rng.randrange(5, 8000) for _ in range(rng.randrange(20, 120))]
            start = time.monotonic()
            result = conversation.turn(token_ids=new, max_tokens=OUTPUT, ignore_eos=True).result()
            turns.append(
                {
                    "prompt": history + new,
                    "reply": result.token_ids,
                    "decode_engine": result.metadata.decode_engine if result.metadata else "",
                    "span": (start, time.monotonic()),
                }
            )
            history = history + new + result.token_ids
    return turns


def test_concurrent_sessions_on_one_decode_engine_each_match_their_full_recompute(cluster, reference) -> None:
    address = f"127.0.0.1:{cluster.ports.scheduler}"
    with ThreadPoolExecutor(SESSIONS) as pool:
        sessions = list(pool.map(lambda seed: session(address, seed), range(SESSIONS)))
    turns = [turn for s in sessions for turn in s]
    assert len({turn["decode_engine"] for turn in turns}) == 1
    # They ran together: every session's first turn was in flight while every other's was.
    firsts = [s[0]["span"] for s in sessions]
    assert max(start for start, _ in firsts) < min(end for _, end in firsts)
    # The reference engine is not thread-safe: replies are checked here, one after another.
    for turn in turns:
        assert turn["reply"] == reference.generate(turn["prompt"], GREEDY).output_token_ids
