"""The baseline KV lifecycles (`ttl-pin`, `offload`, `tokencake`) under KV admission, through the
whole system (LocalCluster, the SDK, the tool proxy's `sleep` tool, the `hinted` eviction policy
in the engines and the store), one cluster per policy:

- two sessions go to a tool: their KV is where the policy puts it (pinned in its engine, dropped,
  dropped and uploaded back into the same engine) and stays committed;
- a third session's turn and a stateless HTTP completion no longer fit the budget: refused at once
  with RESOURCE_EXHAUSTED / 429 and Retry-After, committing nothing;
- the two come back (their returns are always admitted) and every turn's greedy tokens equal a full
  recompute; committed KV never passed the bound and is 0 once all are idle.
"""

from __future__ import annotations

import json
import math
import random
import time
import urllib.error
import urllib.request

import grpc
import pytest

from agentserve.contracts import SamplingParams
from agentserve.kv.block_hash import block_ids_for
from agentserve.sdk import Client
from agentserve.sdk.errors import RetryableError
from tests.integration.test_agent_lifecycle import _call_in_background, _held, _port, _wait_for

pytestmark = pytest.mark.integration

MAX_TOKENS = 16
TENANT = "policies"
WAIT_S = 6.0
_rng = random.Random(6)
FIRST = {agent: [_rng.randrange(5, 8000) for _ in range(70)] for agent in ("a", "b", "c")}
SECOND = [_rng.randrange(5, 8000) for _ in range(20)]
ENV = {
    "AGENTSERVE_EVICTION_POLICY": "hinted",
    # Reloads priced high (6 blocks: 1.8 s): tokencake's upload starts 2.7 s before the return.
    "AGENTSERVE_RELOAD_S_PER_BLOCK": "0.3",
    "AGENTSERVE_PARK_MIN_WAIT_S": "0.2",
    # 2 MB pools: 32 blocks of 16 fp32 tokens of the default model per engine; the budget is a
    # quarter of the two decode pools, 16 blocks: two sessions of 86 tokens (6 blocks each) gone to
    # tools leave no room for a third one's 86-token turn.
    "AGENTSERVE_KV_CACHE_MB": "2",
    "AGENTSERVE_KV_COMMIT_RATIO": "0.25",
}
LIMIT = 16
PARKED_BLOCKS = math.ceil((70 + MAX_TOKENS) / 16)


@pytest.fixture(scope="module", params=["ttl-pin", "offload", "tokencake"])
def cluster(request, tmp_path_factory):
    from tests.support.cluster import local_cluster

    env = {**ENV, "AGENTSERVE_KV_LIFECYCLE": request.param}
    with local_cluster(tmp_path_factory, f"policy-{request.param}", decoders=2, env=env) as running:
        running.policy = request.param
        yield running


def _metrics(cluster) -> dict[str, float]:
    with urllib.request.urlopen(f"http://127.0.0.1:{cluster.ports.metrics}/metrics", timeout=10) as reply:
        lines = reply.read().decode().splitlines()
    return {name: float(value) for name, _, value in (line.rpartition(" ") for line in lines if line[:1] != "#")}


def _committed(cluster) -> float:
    return _metrics(cluster)["agentserve_scheduler_kv_committed_blocks"]


def _completion(cluster) -> tuple[int, dict[str, str], dict]:
    body = json.dumps({"prompt": [5] * 8, "max_tokens": 80, "temperature": 0, "model": "agentserve-tiny"}).encode()
    request = urllib.request.Request(
        f"http://127.0.0.1:{cluster.ports.http}/v1/completions",
        data=body,
        headers={"Content-Type": "application/json"},
        method="POST",
    )
    try:
        with urllib.request.urlopen(request, timeout=60) as reply:
            return reply.status, dict(reply.headers), json.loads(reply.read())
    except urllib.error.HTTPError as err:
        return err.code, dict(err.headers), json.loads(err.read())


def _turn(session, tokens):
    return session.turn(token_ids=tokens, max_tokens=MAX_TOKENS, ignore_eos=True).result()


def test_a_policy_under_kv_pressure_refuses_new_work_and_returns_identical_tokens(cluster, reference):
    client = Client(
        f"127.0.0.1:{cluster.ports.scheduler}", f"http://127.0.0.1:{cluster.ports.toolproxy_http}", timeout_s=120
    )
    with client:
        sessions = {agent: client.open_session(tenant=TENANT, agent=agent, critical=agent == "a") for agent in "ab"}
        first = {agent: _turn(session, FIRST[agent]) for agent, session in sessions.items()}
        assert _metrics(cluster)["agentserve_scheduler_kv_commit_limit_blocks"] == LIMIT
        histories = {agent: FIRST[agent] + first[agent].token_ids for agent in "ab"}
        ids = {
            agent: block_ids_for(histories[agent], reference.block_size, reference.fingerprint, TENANT)
            for agent in "ab"
        }
        holders = {agent: _port(first[agent].metadata.decode_engine) for agent in "ab"}
        returned = {agent: _call_in_background(sessions[agent], WAIT_S, WAIT_S) for agent in "ab"}
        _wait_for(lambda: _committed(cluster) == 2 * PARKED_BLOCKS, 5.0, "both sessions' KV to be committed")

        # No room for a third session's turn, nor a stateless completion: refused at once.
        with client.open_session(tenant=TENANT, agent="c") as third, pytest.raises(RetryableError) as err:
            _turn(third, FIRST["c"])
        assert err.value.code == grpc.StatusCode.RESOURCE_EXHAUSTED and err.value.retry_after_s == 2.0
        assert f"this turn needs {PARKED_BLOCKS} KV blocks; {2 * PARKED_BLOCKS} of the decode engines' 16" in (
            err.value.message
        )
        status, headers, body = _completion(cluster)
        assert (status, headers["Retry-After"]) == (429, "2"), body
        assert _committed(cluster) == 2 * PARKED_BLOCKS  # refusals commit nothing

        # Where each policy keeps the KV during the wait (the calls take WAIT_S).
        time.sleep(WAIT_S / 2)
        for agent in "ab":
            held = _held(cluster, ids[agent])
            if cluster.policy == "ttl-pin":  # pinned in its engine
                assert held[holders[agent]] == len(ids[agent])
            elif cluster.policy == "offload":  # dropped, never uploaded
                assert set(held.values()) == {0}
            else:  # tokencake: dropped, then uploaded back into the engine it left, before the return
                _wait_for(lambda a=agent: _held(cluster, ids[a])[holders[a]] == len(ids[a]), WAIT_S, "the upload")
        for agent in "ab":
            assert returned[agent].wait(30)

        # The returns are admitted whatever the budget, and give the tokens of a full recompute.
        second = {agent: _turn(sessions[agent], SECOND) for agent in "ab"}
        if cluster.policy == "tokencake":
            assert {agent: _port(second[agent].metadata.decode_engine) for agent in "ab"} == holders
        params = SamplingParams(max_tokens=MAX_TOKENS, ignore_eos=True)
        for agent in "ab":
            assert first[agent].token_ids == reference.generate(FIRST[agent], params).output_token_ids
            prompt = histories[agent] + SECOND
            assert second[agent].prompt_tokens == len(prompt)
            assert second[agent].token_ids == reference.generate(prompt, params).output_token_ids
            sessions[agent].close()
    assert _committed(cluster) == 0
    actions = {"ttl-pin": "pin", "offload": "offload", "tokencake": "upload"}
    assert _metrics(cluster)[f'agentserve_scheduler_kv_parking_total{{action="{actions[cluster.policy]}"}}'] == 2
    assert _metrics(cluster)['agentserve_scheduler_refused_total{bound="kv"}'] == 2
