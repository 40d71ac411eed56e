"""The whole system as local processes (`agentserve up --local`'s LocalCluster) driven by the SDK,
the openai client and raw HTTP/gRPC: an agent session with a tool call, cache hits across turns,
parity with a single-process full recompute, bad input everywhere, and a decode engine dying."""

from __future__ import annotations

import json
import random
import signal
import threading
import urllib.error
import urllib.request

import grpc
import openai
import pytest

from agentserve.contracts import SamplingParams
from agentserve.sdk import Client, RetryableError
from agentserve.v1 import common_pb2, scheduler_pb2, scheduler_pb2_grpc
from tests.support.tails import cached_history

pytestmark = pytest.mark.integration

BLOCK = 16
MODEL = "agentserve-tiny"  # the scheduler's default model name


@pytest.fixture(scope="module")
def cluster(shared_cluster):
    return shared_cluster


def _client(cluster) -> Client:
    return Client(
        f"127.0.0.1:{cluster.ports.scheduler}", toolproxy_url=f"http://127.0.0.1:{cluster.ports.toolproxy_http}"
    )


def test_agent_session_with_tool_call_hits_cache_and_matches_recompute(cluster, reference):
    rng = random.Random(11)
    turns = [[rng.randrange(5, 8000) for _ in range(n)] for n in (90, 37, 52)]
    max_tokens = 22
    params = SamplingParams(max_tokens=max_tokens, ignore_eos=True)
    history: list[int] = []
    with _client(cluster) as client, client.open_session(tenant="t1", agent="coder") as session:
        for i, new_tokens in enumerate(turns):
            prompt = history + new_tokens
            result = session.turn(token_ids=new_tokens, max_tokens=max_tokens, ignore_eos=True).result()
            assert result.prompt_tokens == len(prompt)
            assert result.token_ids == reference.generate(prompt, params).output_token_ids
            if i > 0:
                # Every full block of the previous turn's prompt and output is a hit, and its tail.
                assert result.cached_tokens == cached_history(len(history), BLOCK)
            if i == 0:
                tool = session.call_tool("sleep", {"seconds": 0.3})
                assert tool is not None
            history = prompt + result.token_ids
            assert len(result.metadata.trace_id) == 32


def test_text_session_second_turn_hits_first_turn(cluster):
    with _client(cluster) as client, client.open_session(tenant="t2", system_prompt="You are terse.") as session:
        first = session.turn("List three files to inspect.", max_tokens=20, ignore_eos=True).result()
        second = session.turn("Now open the first one.", max_tokens=8, ignore_eos=True).result()
    assert second.cached_tokens == cached_history(first.prompt_tokens + len(first.token_ids), BLOCK)
    assert second.prompt_tokens > first.prompt_tokens + len(first.token_ids)


def test_openai_client_streaming_and_not(cluster):
    client = openai.OpenAI(base_url=f"http://127.0.0.1:{cluster.ports.http}/v1", api_key="unused")
    model = client.models.list().data[0].id
    messages = [{"role": "user", "content": "Say something about caches."}]
    whole = client.chat.completions.create(model=model, messages=messages, max_tokens=12, temperature=0)
    streamed = client.chat.completions.create(model=model, messages=messages, max_tokens=12, temperature=0, stream=True)
    text = "".join(chunk.choices[0].delta.content or "" for chunk in streamed if chunk.choices)
    assert whole.usage.completion_tokens > 0
    assert text == whole.choices[0].message.content
    # Same prompt twice: the second request's prompt is served from cache (all but the last block).
    again = client.chat.completions.create(model=model, messages=messages, max_tokens=4, temperature=0)
    assert again.usage.prompt_tokens_details.cached_tokens == (again.usage.prompt_tokens - 1) // BLOCK * BLOCK
    completion = client.completions.create(model=model, prompt="def cache():", max_tokens=5, temperature=0)
    assert completion.choices[0].text is not None and completion.usage.completion_tokens == 5


def _turn_error(stub, request) -> grpc.RpcError:
    with pytest.raises(grpc.RpcError) as err:
        list(stub.Turn(request))
    return err.value


def test_bad_grpc_input_is_invalid_argument_and_service_stays_up(cluster):
    with grpc.insecure_channel(f"127.0.0.1:{cluster.ports.scheduler}") as channel:
        stub = scheduler_pb2_grpc.SchedulerStub(channel)
        session = stub.OpenSession(scheduler_pb2.OpenSessionRequest(tenant="bad")).session_id
        ok = common_pb2.SamplingParams(max_tokens=4)
        cases = {
            "unknown session": scheduler_pb2.TurnRequest(session_id="nope", message="hi", sampling=ok),
            "empty message": scheduler_pb2.TurnRequest(session_id=session, message="", sampling=ok),
            "max_tokens 0": scheduler_pb2.TurnRequest(
                session_id=session, message="hi", sampling=common_pb2.SamplingParams(max_tokens=0)
            ),
            "max_tokens 1e9": scheduler_pb2.TurnRequest(
                session_id=session, message="hi", sampling=common_pb2.SamplingParams(max_tokens=10**9)
            ),
            "token out of range": scheduler_pb2.TurnRequest(session_id=session, token_ids=[5, 10**6], sampling=ok),
            "oversize message": scheduler_pb2.TurnRequest(session_id=session, token_ids=[5] * 40000, sampling=ok),
        }
        for name, request in cases.items():
            err = _turn_error(stub, request)
            expected = grpc.StatusCode.NOT_FOUND if name == "unknown session" else grpc.StatusCode.INVALID_ARGUMENT
            assert err.code() == expected, name
            assert err.details(), name
        with pytest.raises(grpc.RpcError) as err:
            stub.CloseSession(scheduler_pb2.CloseSessionRequest(session_id="nope"))
        assert err.value.code() == grpc.StatusCode.NOT_FOUND
        chunks = list(stub.Turn(scheduler_pb2.TurnRequest(session_id=session, message="hi", sampling=ok)))
        assert chunks[-1].finished


def _post(cluster, path: str, body: bytes) -> tuple[int, dict]:
    request = urllib.request.Request(
        f"http://127.0.0.1:{cluster.ports.http}{path}", data=body, headers={"Content-Type": "application/json"}
    )
    try:
        with urllib.request.urlopen(request, timeout=60) as reply:
            return reply.status, json.loads(reply.read())
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read())


def test_bad_http_input_is_400_and_service_stays_up(cluster):
    chat = "/v1/chat/completions"
    msg = [{"role": "user", "content": "hi"}]
    cases = {
        "malformed json": (chat, b"{not json"),
        "no messages": (chat, json.dumps({"model": MODEL, "messages": []}).encode()),
        "empty message": (chat, json.dumps({"model": MODEL, "messages": [{"role": "user", "content": ""}]}).encode()),
        "max_tokens 0": (chat, json.dumps({"model": MODEL, "messages": msg, "max_tokens": 0}).encode()),
        "max_tokens 1e9": (chat, json.dumps({"model": MODEL, "messages": msg, "max_tokens": 10**9}).encode()),
        "token ids out of range": ("/v1/completions", json.dumps({"model": MODEL, "prompt": [5, 10**6]}).encode()),
        "oversize message": (
            chat,
            json.dumps({"model": MODEL, "messages": [{"role": "user", "content": "word " * 60000}]}).encode(),
        ),
    }
    for name, (path, body) in cases.items():
        status, reply = _post(cluster, path, body)
        assert status == 400, (name, reply)
        assert reply["error"]["message"], name
    status, reply = _post(cluster, chat, json.dumps({"model": MODEL, "messages": msg, "max_tokens": 3}).encode())
    assert status == 200 and reply["usage"]["completion_tokens"] > 0


def test_decode_engine_killed_mid_turn(cluster):
    decoders = [p for p in cluster.procs if p.name.startswith("decode")]
    with _client(cluster) as client, client.open_session(tenant="kill") as session:
        session.turn(token_ids=list(range(5, 70)), max_tokens=8, ignore_eos=True).result()
        turn = session.turn(token_ids=list(range(100, 140)), max_tokens=400, ignore_eos=True)
        chunks = iter(turn)
        first = next(chunks)  # the turn is streaming from some decode engine now
        victim = next(
            p for p in decoders if first.metadata and p.name and str(p.grpc_port) in first.metadata.decode_engine
        )
        threading.Timer(0.0, victim.popen.send_signal, args=(signal.SIGKILL,)).start()
        try:
            tokens = list(first.token_ids) + [t for chunk in chunks for t in chunk.token_ids]
            assert len(tokens) == 400  # completed (on the other engine)
        except RetryableError as exc:
            assert "retry" in str(exc).lower()
        after = session.turn(token_ids=[9, 10, 11], max_tokens=5, ignore_eos=True).result()
        assert len(after.token_ids) == 5
        assert victim.popen.wait(10) == -signal.SIGKILL
