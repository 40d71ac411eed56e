"""Durable sessions: the scheduler SIGKILLed between two turns and restarted; the next turn of each
existing session (gRPC and HTTP) gives exactly the tokens of an uninterrupted run."""

from __future__ import annotations

import json
import random
import signal
import urllib.request

import pytest

from agentserve.contracts import SamplingParams
from agentserve.sdk import Client
from tests.support.cluster import local_cluster

pytestmark = pytest.mark.integration

MAX_TOKENS = 12


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    with local_cluster(tmp_path_factory, "durable", decoders=1) as running:
        yield running


def _chat(cluster, session_id: str, messages: list[dict]) -> dict:
    body = json.dumps({"messages": messages, "max_tokens": MAX_TOKENS, "temperature": 0}).encode()
    request = urllib.request.Request(
        f"http://127.0.0.1:{cluster.ports.http}/v1/chat/completions",
        data=body,
        headers={"Content-Type": "application/json", "X-Session-Id": session_id},
    )
    with urllib.request.urlopen(request, timeout=120) as reply:
        return json.loads(reply.read())


def _kill_and_restart_scheduler(cluster) -> None:
    scheduler = next(p for p in cluster.procs if p.name == "scheduler")
    scheduler.popen.send_signal(signal.SIGKILL)
    assert scheduler.popen.wait(timeout=30) == -signal.SIGKILL
    cluster.respawn("scheduler")


def test_sessions_survive_a_scheduler_sigkill_with_identical_tokens(cluster, reference):
    rng = random.Random(5)
    first, second = ([rng.randrange(5, 8000) for _ in range(n)] for n in (70, 25))
    params = SamplingParams(max_tokens=MAX_TOKENS, ignore_eos=True)
    address = f"127.0.0.1:{cluster.ports.scheduler}"
    conversation = [{"role": "user", "content": "Name three files worth caching."}]
    with Client(address) as client:
        session = client.open_session(tenant="durable", agent="coder")
        one = session.turn(token_ids=first, max_tokens=MAX_TOKENS, ignore_eos=True).result()
        # Two HTTP sessions at the same point: one goes on before the kill, as the uninterrupted run.
        replies = {sid: _chat(cluster, sid, conversation) for sid in ("http-kept", "http-control")}
        assert replies["http-kept"]["choices"] == replies["http-control"]["choices"]
        follow_up = [
            *conversation,
            {"role": "assistant", "content": replies["http-control"]["choices"][0]["message"]["content"]},
            {"role": "user", "content": "Now the second one."},
        ]
        uninterrupted = _chat(cluster, "http-control", follow_up)

    _kill_and_restart_scheduler(cluster)

    with Client(address) as client:
        # The session id from before the kill: its history is back, token for token.
        resumed = client.session(session.id)
        two = resumed.turn(token_ids=second, max_tokens=MAX_TOKENS, ignore_eos=True).result()
        resumed.close()
    history = first + one.token_ids
    assert two.prompt_tokens == len(history) + len(second)
    assert two.token_ids == reference.generate(history + second, params).output_token_ids
    after = _chat(cluster, "http-kept", follow_up)
    assert after["choices"] == uninterrupted["choices"]
    assert after["usage"]["prompt_tokens"] == uninterrupted["usage"]["prompt_tokens"]
