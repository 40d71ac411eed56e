"""Agent sessions against the compose deployment, through the SDK on the published loopback ports.

The reference for every parity check is a single-process full recompute on the host: the image
bakes the same embedded model (`agentserve model init --preset tiny`: the shipped trained weights), so
the weights and the fingerprint are identical.
"""

from __future__ import annotations

import random
import threading
import urllib.request

import pytest

from agentserve.contracts import SamplingParams
from agentserve.engine.engine import LLMEngine
from agentserve.sdk import Client, RetryableError, TurnResult
from tests.support.compose import TEST_TIMEOUT_S, Stack, replica_number
from tests.support.tails import cached_history

pytestmark = [pytest.mark.container, pytest.mark.timeout(TEST_TIMEOUT_S)]

BLOCK = 16
MAX_TOKENS = 12
TURNS = ("Plan the next tool call for the build.", "The tool returned: 3 tests failed. What next?")
ADVERTISED = "from agentserve.common.netutil import advertise_host; print(advertise_host(''))"


@pytest.fixture
def client(stack: Stack):
    with Client(stack.grpc_address, stack.toolproxy_url, timeout_s=120) as running:
        yield running


def run_turns(client: Client, tenant: str, messages=TURNS) -> list[TurnResult]:
    session = client.open_session(tenant=tenant, agent="coder")
    try:
        return [session.turn(m, max_tokens=MAX_TOKENS, ignore_eos=True).result() for m in messages]
    finally:
        session.close()


def test_three_turn_session_with_tool_call_hits_cache_matches_recompute_and_is_traced(
    stack: Stack, client: Client, reference: LLMEngine
):
    rng = random.Random(5)
    turns = [[rng.randrange(5, 8000) for _ in range(n)] for n in (75, 30, 41)]
    params = SamplingParams(max_tokens=MAX_TOKENS, ignore_eos=True)
    history: list[int] = []
    results = []
    session = client.open_session(tenant="parity", agent="coder")
    try:
        for i, new_tokens in enumerate(turns):
            prompt = history + new_tokens
            result = session.turn(token_ids=new_tokens, max_tokens=MAX_TOKENS, ignore_eos=True).result()
            assert result.prompt_tokens == len(prompt)
            assert result.token_ids == reference.generate(prompt, params).output_token_ids, f"turn {i + 1}"
            if i > 0:
                # Every full block of the previous turn's prompt and output is a hit, and its tail.
                assert result.cached_tokens == cached_history(len(history), BLOCK)
            if i == 0:
                assert session.call_tool("sleep", {"seconds": 0.2}) is not None
            history = prompt + result.token_ids
            results.append(result)
    finally:
        session.close()

    # Turn 2's KV moved three ways, each a kv.transfer span in the turn's trace: turn 1's blocks
    # brought to the prefill (path A from the store over its storage NIC, or, when the DualPath
    # scheduler's NIC balance picks the decode side, path B / a relay over the compute network), the
    # handoff to decode, and the persists.
    trace_id = results[1].trace_id
    spans = stack.phoenix.wait_for_spans("kv.transfer", trace_id=trace_id, count=4)
    by_path: dict[str, list[dict]] = {}
    for span in spans:
        by_path.setdefault(span["attributes"]["kv.path"], []).append(span)
    assert {"handoff", "persist"} <= by_path.keys() and by_path.keys() & {"A", "B", "relay"}, sorted(by_path)
    links = {"A": "snic", "B": "snic", "persist": "snic", "handoff": "cnic", "relay": "cnic"}
    assert all(s["attributes"]["net.link"] == links[s["attributes"]["kv.path"]] for s in spans), spans
    assert all(s["attributes"]["kv.bytes"] > 0 and s["attributes"]["kv.blocks"] > 0 for s in spans)
    with urllib.request.urlopen(stack.phoenix.trace_url(trace_id), timeout=10) as page:
        assert page.status == 200


def test_text_session_second_turn_reuses_the_first_turns_kv(client: Client):
    first, second = run_turns(client, tenant="cache")
    assert len(first.token_ids) == len(second.token_ids) == MAX_TOKENS
    assert first.cached_tokens == 0
    assert second.cached_tokens == cached_history(first.prompt_tokens + MAX_TOKENS, BLOCK)
    assert second.prompt_tokens > first.prompt_tokens + MAX_TOKENS


def test_tenants_get_identical_greedy_output_but_never_share_cache(client: Client):
    a = run_turns(client, tenant="tenant-a")
    b = run_turns(client, tenant="tenant-b")
    assert [t.token_ids for t in a] == [t.token_ids for t in b]
    assert b[0].cached_tokens == 0  # tenant-a's identical prompt is invisible to tenant-b


def test_tool_call_goes_through_the_proxy(stack: Stack, client: Client):
    session = client.open_session(tenant="tools", agent="coder")
    try:
        session.turn(TURNS[0], max_tokens=4).result()
        assert session.call_tool("echo", {"query": "failing tests"}) == {"query": "failing tests"}
        assert session.turn(TURNS[1], max_tokens=4).result().cached_tokens > 0
    finally:
        session.close()
    stack.phoenix.wait_for_spans("tool.call")


def test_decode_container_killed_mid_turn(stack: Stack, client: Client):
    session = client.open_session(tenant="survivor", agent="coder")
    try:
        session.turn(TURNS[0], max_tokens=MAX_TOKENS, ignore_eos=True).result()
        chunks = iter(session.turn(TURNS[1], max_tokens=400, ignore_eos=True))
        first = next(chunks)  # streaming from some decode engine now
        victim = decode_replica_of(stack, first.metadata.decode_engine)
        killer = threading.Thread(target=stack.kill, args=("decode", victim))
        killer.start()
        try:
            tokens = list(first.token_ids) + [t for chunk in chunks for t in chunk.token_ids]
            assert len(tokens) == 400  # the turn completed on the other decode engine
        except RetryableError as exc:
            assert "retry" in str(exc).lower()  # or failed cleanly, retryable
        killer.join()
        after = session.turn("Summarize the fix.", max_tokens=MAX_TOKENS, ignore_eos=True).result()
        assert len(after.token_ids) == MAX_TOKENS
        assert after.metadata.decode_engine != first.metadata.decode_engine
    finally:
        session.close()
        stack.restore()


def decode_replica_of(stack: Stack, engine_id: str) -> int:
    """The replica number of the decode container whose advertised address is in `engine_id`."""
    for container in stack.containers("decode"):
        replica = replica_number(container)
        host = stack.exec("decode", ["python", "-c", ADVERTISED], replica=replica).strip()
        if f"-{host}:" in engine_id:
            return replica
    raise LookupError(f"no decode container advertises {engine_id}")
