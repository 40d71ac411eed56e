"""The same images as a Docker Swarm stack: `docker stack deploy -c docker-compose.swarm.yml` on a
single-node swarm (tests/support/swarm.py makes one if the daemon is not a manager, and leaves the
daemon as it found it), then the demo's session through the published ports.

One node stands in for several: the placement constraints, the secrets, the overlay networks and the
per-task DNS are Swarm's own here as on many hosts; what one node cannot show is a task moving
between hosts (README: "Running on several hosts").
"""

from __future__ import annotations

import io
import sys

import pytest

from agentserve.cli.demo import run_demo
from agentserve.contracts import SamplingParams
from agentserve.engine.engine import LLMEngine
from agentserve.sdk import Client
from agentserve.sdk.errors import AuthenticationError
from tests.support.compose import TEST_TIMEOUT_S
from tests.support.swarm import SwarmStack, deploy_stack
from tests.support.tails import cached_history

pytestmark = [pytest.mark.container, pytest.mark.timeout(TEST_TIMEOUT_S)]

MAX_TOKENS = 12


@pytest.fixture(scope="module")
def swarm_stack() -> SwarmStack:
    stack = deploy_stack()
    try:
        yield stack
    finally:
        print(f"\n[swarm] logs of {stack.name}: {stack.save_logs()}", file=sys.stderr)
        stack.close()


def test_the_stack_runs_every_service_with_its_replicas_secrets_and_placement(swarm_stack: SwarmStack):
    assert swarm_stack.replicas() == {
        "kvstore": "1/1",
        "scheduler": "1/1",
        "prefill": "1/1",
        "decode": "2/2",
        "toolproxy": "1/1",
        "tracing": "1/1",
    }
    kvstore = swarm_stack.service_spec("kvstore")
    assert kvstore["TaskTemplate"]["Placement"]["Constraints"] == ["node.labels.agentserve.kvstore == true"]
    assert kvstore["EndpointSpec"]["Mode"] == "dnsrr"  # `kvstore` resolves to every instance
    # The internal plane's certificate and key are secrets, the key readable by the image's user only.
    secrets = {s["File"]["Name"]: s for s in kvstore["TaskTemplate"]["ContainerSpec"]["Secrets"]}
    assert set(secrets) == {"ca.pem", "cert.pem", "key.pem"}
    assert (secrets["key.pem"]["File"]["UID"], secrets["key.pem"]["File"]["Mode"]) == ("10001", 0o400)
    assert secrets["key.pem"]["SecretName"] == f"{swarm_stack.name}_kvstore_key"


def test_the_demo_session_runs_against_the_stack_with_cache_hits(
    swarm_stack: SwarmStack, monkeypatch: pytest.MonkeyPatch
):
    monkeypatch.setenv("AGENTSERVE_API_KEY", swarm_stack.api_key)
    printed = io.StringIO()
    # The tracing UI is not published by the stack: the demo says so in place of a link.
    turns = run_demo(swarm_stack.grpc_address, swarm_stack.toolproxy_url, out=printed, tracing_ui="http://127.0.0.1:9")
    print(printed.getvalue(), file=sys.stderr)
    assert [t["turn"] for t in turns] == [1, 2, 3]
    assert all(t["text"].strip() and t["completion_tokens"] > 0 for t in turns), turns
    assert turns[0]["cached_tokens"] == 0
    for previous, turn in zip(turns, turns[1:]):
        # The server kept the history: the whole of the previous turn is a hit but its last token.
        assert turn["prompt_tokens"] > previous["prompt_tokens"] + previous["completion_tokens"]
        assert turn["cached_tokens"] == cached_history(previous["prompt_tokens"] + previous["completion_tokens"])


def test_turns_match_a_full_recompute_and_need_the_api_key(swarm_stack: SwarmStack, reference: LLMEngine):
    params = SamplingParams(max_tokens=MAX_TOKENS, ignore_eos=True)
    first, second = [list(range(100, 150)), list(range(700, 733))]
    with (
        Client(swarm_stack.grpc_address, swarm_stack.toolproxy_url, api_key=swarm_stack.api_key) as client,
        client.open_session(tenant="demo", agent="coder") as session,
    ):
        one = session.turn(token_ids=first, max_tokens=MAX_TOKENS, ignore_eos=True).result()
        two = session.turn(token_ids=second, max_tokens=MAX_TOKENS, ignore_eos=True).result()
    assert one.token_ids == reference.generate(first, params).output_token_ids
    history = first + one.token_ids
    assert two.token_ids == reference.generate(history + second, params).output_token_ids
    assert two.cached_tokens == cached_history(len(history))
    with (
        Client(swarm_stack.grpc_address, swarm_stack.toolproxy_url, api_key="") as anonymous,
        pytest.raises(AuthenticationError),
    ):
        anonymous.open_session(tenant="demo", agent="coder")
