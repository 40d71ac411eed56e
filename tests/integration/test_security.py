"""API keys, tenant-bound sessions, load bounds and request limits, against real services on loopback
(`LocalCluster` with AGENTSERVE_API_KEYS and small bounds): exact status codes over HTTP and gRPC,
a tenant that never reaches another's session or history, 429 / RESOURCE_EXHAUSTED with their
Retry-After, and oversized or hostile bodies refused fast with every engine kept."""

from __future__ import annotations

import http.client
import json
import time

import grpc
import pytest

from agentserve.cluster.readiness import http_health
from agentserve.sdk import AuthenticationError, Client, RetryableError, SessionNotFound
from agentserve.v1 import common_pb2, scheduler_pb2, scheduler_pb2_grpc
from tests.support.cluster import local_cluster
from tests.support.tails import cached_history

pytestmark = pytest.mark.integration

KEYS = {
    "alice": "as-alice-key-0123456789abcdef",
    "bob": "as-bob-key-0123456789abcdefgh",
    "flood": "as-flood-key-0123456789abcdef",
    "capped": "as-capped-key-0123456789abcde",
}
LIMITS = {
    "AGENTSERVE_API_KEYS": ",".join(f"{tenant}:{key}" for tenant, key in KEYS.items()),
    "AGENTSERVE_MAX_INFLIGHT_PER_TENANT": "2",
    "AGENTSERVE_TENANT_TURNS_PER_S": "2",
    "AGENTSERVE_TENANT_BURST": "30",
    "AGENTSERVE_MAX_SESSIONS_PER_TENANT": "3",
}
MAX_TOKENS = 4


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    with local_cluster(tmp_path_factory, "security", decoders=1, env=LIMITS) as running:
        yield running


def _auth(tenant: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {KEYS[tenant]}"}


def _metadata(tenant: str) -> tuple[tuple[str, str], ...]:
    return (("authorization", f"Bearer {KEYS[tenant]}"),)


def _http(cluster, method: str, path: str, body: bytes | None = None, headers=None, timeout=60.0):
    """(status, headers, parsed JSON body, seconds) of one request on a fresh connection."""
    conn = http.client.HTTPConnection("127.0.0.1", cluster.ports.http, timeout=timeout)
    started = time.perf_counter()
    try:
        conn.request(method, path, body=body, headers={"Content-Type": "application/json", **(headers or {})})
        reply = conn.getresponse()
        raw = reply.read()
        return reply.status, dict(reply.getheaders()), json.loads(raw) if raw else None, time.perf_counter() - started
    finally:
        conn.close()


def _chat(cluster, tenant: str, content: str, session_id: str | None = None, extra=None):
    headers = {**_auth(tenant), **({"X-Session-Id": session_id} if session_id else {}), **(extra or {})}
    body = {"messages": [{"role": "user", "content": content}], "max_tokens": MAX_TOKENS, "temperature": 0}
    return _http(cluster, "POST", "/v1/chat/completions", json.dumps(body).encode(), headers)


def _rpc_error(call) -> tuple[grpc.StatusCode, str]:
    with pytest.raises(grpc.RpcError) as err:
        result = call()
        if not isinstance(result, scheduler_pb2.OpenSessionResponse | scheduler_pb2.CloseSessionResponse):
            list(result)
    return err.value.code(), err.value.details()


def test_no_key_or_a_wrong_key_is_401_and_unauthenticated(cluster):
    for headers in ({}, {"Authorization": "Bearer as-not-anyones-key-0000000"}):
        for method, path in (("GET", "/v1/models"), ("POST", "/v1/chat/completions"), ("DELETE", "/v1/sessions/x")):
            status, reply_headers, body, _ = _http(cluster, method, path, b"{}", headers)
            assert (status, reply_headers["WWW-Authenticate"], body["error"]["code"]) == (
                401,
                "Bearer",
                "invalid_api_key",
            ), (headers, path)
    assert http_health(cluster.ports.http) == (200, {"status": "ok"})  # probes need no key
    with grpc.insecure_channel(f"127.0.0.1:{cluster.ports.scheduler}") as channel:
        stub = scheduler_pb2_grpc.SchedulerStub(channel)
        for metadata in ((), (("authorization", "Bearer as-not-anyones-key-0000000"),)):
            code, _ = _rpc_error(lambda m=metadata: stub.OpenSession(scheduler_pb2.OpenSessionRequest(), metadata=m))
            assert code == grpc.StatusCode.UNAUTHENTICATED
            code, _ = _rpc_error(lambda m=metadata: stub.ListModels(scheduler_pb2.ListModelsRequest(), metadata=m))
            assert code == grpc.StatusCode.UNAUTHENTICATED
    address = f"127.0.0.1:{cluster.ports.scheduler}"
    with Client(address, api_key="as-not-anyones-key-0000000") as client, pytest.raises(AuthenticationError):
        client.open_session()
    with Client(address, api_key=KEYS["alice"]) as client:
        assert client.list_models() == ["agentserve-tiny"]
        with pytest.raises(Exception, match="OpenSessionRequest.tenant 'bob' does not match the API key's tenant"):
            client.open_session(tenant="bob")


def test_another_tenants_session_is_not_found_exactly_like_an_unknown_one(cluster):
    address = f"127.0.0.1:{cluster.ports.scheduler}"
    secret = "The launch code is 7311; never repeat it."
    with Client(address, api_key=KEYS["alice"]) as alice:
        session = alice.open_session(agent="victim")
        first = session.turn(secret, max_tokens=MAX_TOKENS, ignore_eos=True).result()
        history_tokens = first.prompt_tokens + len(first.token_ids)
        with grpc.insecure_channel(address) as channel:
            stub = scheduler_pb2_grpc.SchedulerStub(channel)
            sampling = common_pb2.SamplingParams(max_tokens=MAX_TOKENS)
            outcomes = {}
            for label, session_id in (("alice's", session.id), ("unknown", "f" * 32)):
                outcomes[label] = [
                    _rpc_error(
                        lambda sid=session_id: stub.Turn(
                            scheduler_pb2.TurnRequest(session_id=sid, message="repeat", sampling=sampling),
                            metadata=_metadata("bob"),
                        )
                    ),
                    _rpc_error(
                        lambda sid=session_id: stub.OpenSession(
                            scheduler_pb2.OpenSessionRequest(parent_session_id=sid), metadata=_metadata("bob")
                        )
                    ),
                    _rpc_error(
                        lambda sid=session_id: stub.CloseSession(
                            scheduler_pb2.CloseSessionRequest(session_id=sid), metadata=_metadata("bob")
                        )
                    ),
                ]
        # The same code and, but for the id itself, the same words: nothing tells the two apart.
        for label, errors in outcomes.items():
            sid = session.id if label == "alice's" else "f" * 32
            assert [(code, details.replace(sid, "<id>")) for code, details in errors] == [
                (grpc.StatusCode.NOT_FOUND, "unknown session '<id>'")
            ] * 3, label
        with Client(address, api_key=KEYS["bob"]) as bob, pytest.raises(SessionNotFound):
            bob.open_session(parent=session.id)
        # Alice's session is intact: its next turn extends the untouched history.
        second = session.turn("Go on.", max_tokens=MAX_TOKENS, ignore_eos=True).result()
        assert second.cached_tokens == cached_history(history_tokens)
        session.close()


def test_http_session_ids_are_per_tenant_and_bob_never_sees_alices_history(cluster):
    status, headers, alice, _ = _chat(cluster, "alice", "My password is hunter2, keep it.", session_id="chat-1")
    assert status == 200 and headers["X-Session-Id"] == "chat-1"
    alice_again = _chat(cluster, "alice", "My password is hunter2, keep it.", session_id="chat-2")[2]
    # Bob under Alice's id gets a session of his own: the prompt of a fresh conversation, no hits.
    status, _, bob, _ = _chat(cluster, "bob", "My password is hunter2, keep it.", session_id="chat-1")
    assert status == 200
    assert bob["usage"]["prompt_tokens"] == alice_again["usage"]["prompt_tokens"] == alice["usage"]["prompt_tokens"]
    assert bob["usage"]["prompt_tokens_details"]["cached_tokens"] == 0
    # Deleting by id reaches only one's own session; another's is 404 like an unknown id.
    unknown = _http(cluster, "DELETE", "/v1/sessions/never-opened", headers=_auth("bob"))
    status, _, body, _ = _http(cluster, "DELETE", "/v1/sessions/chat-2", headers=_auth("bob"))
    assert (status, body["error"]["message"]) == (404, "unknown session 'chat-2'")
    assert (unknown[0], unknown[2]["error"]["message"]) == (404, "unknown session 'never-opened'")
    for tenant, session_id, turns in (("bob", "chat-1", 1), ("alice", "chat-1", 1), ("alice", "chat-2", 1)):
        status, _, body, _ = _http(cluster, "DELETE", f"/v1/sessions/{session_id}", headers=_auth(tenant))
        assert (status, body["turns"]) == (200, turns), (tenant, session_id)


def test_sessions_past_the_tenant_cap_are_resource_exhausted(cluster):
    address = f"127.0.0.1:{cluster.ports.scheduler}"
    with Client(address, api_key=KEYS["capped"]) as client:
        opened = [client.open_session() for _ in range(3)]
        with pytest.raises(RetryableError, match="tenant 'capped' has 3 open sessions, its limit") as err:
            client.open_session()
        assert err.value.retry_after_s == 60.0
        opened[0].close()
        client.open_session().close()  # a closed one makes room
        for session in opened[1:]:
            session.close()


def test_over_the_tenant_bounds_is_429_and_resource_exhausted_with_retry_after(cluster):
    from concurrent.futures import ThreadPoolExecutor

    # In flight: 2 per tenant; 8 long turns at once leave 6 refused at once.
    body = json.dumps(
        {"prompt": [5] * 8, "max_tokens": 48, "ignore_eos": True, "temperature": 0, "model": "agentserve-tiny"}
    ).encode()
    with ThreadPoolExecutor(8) as pool:
        replies = list(pool.map(lambda _: _http(cluster, "POST", "/v1/completions", body, _auth("flood")), range(8)))
    statuses = sorted(status for status, *_ in replies)
    assert statuses.count(200) >= 2 and set(statuses) == {200, 429}, statuses
    for status, headers, reply, seconds in replies:
        if status == 429:
            assert headers["Retry-After"] == "1" and seconds < 1.0
            assert reply["error"]["message"] == "tenant 'flood' is at its limit of 2 turns in flight; retry later"
    # Rate: 2 turns/s after a burst of 30; sequential turns are refused once the bucket is dry.
    address = f"127.0.0.1:{cluster.ports.scheduler}"
    with Client(address, api_key=KEYS["flood"]) as client, client.open_session() as session:
        started, admitted = time.monotonic(), 0
        with pytest.raises(RetryableError) as err:
            while True:
                session.turn(token_ids=[7], max_tokens=1).result()
                admitted += 1
        elapsed = time.monotonic() - started
        assert err.value.code == grpc.StatusCode.RESOURCE_EXHAUSTED and err.value.retry_after_s == 1.0
        assert "over its rate of 2 turns/s (burst 30)" in err.value.message
        # The 8 HTTP turns above took their tokens too: at most 30 + 2/s of them in all.
        assert 30 - 8 <= admitted <= 30 + 2 * elapsed + 1
    # Other tenants are untouched by the flood.
    assert _chat(cluster, "alice", "Still there?")[0] == 200


def test_oversized_and_hostile_bodies_are_refused_within_a_second_and_no_engine_is_dropped(cluster):
    chat = "/v1/chat/completions"
    ten_mb = json.dumps({"messages": [{"role": "user", "content": "word " * (2 << 20)}]}).encode()
    deep = b'{"messages": ' + b"[" * 100_000 + b"]" * 100_000 + b"}"
    lone = b'{"messages": [{"role": "user", "content": "\\ud800 hi"}]}'
    outcomes = {
        "10 MB body": _http(cluster, "POST", chat, ten_mb, _auth("alice")),
        "100,000-deep JSON": _http(cluster, "POST", chat, deep, _auth("alice")),
        "lone surrogate": _http(cluster, "POST", chat, lone, _auth("alice")),
    }
    expected = {
        "10 MB body": (413, "Maximum request body size 4194304 exceeded"),
        "100,000-deep JSON": (400, "request body nests deeper than 64 levels"),
        "lone surrogate": (400, "request body holds a lone UTF-16 surrogate"),
    }
    for name, (status, _, body, seconds) in outcomes.items():
        assert (status, body["error"]["message"][: len(expected[name][1])]) == expected[name], name
        assert seconds < 1.0, (name, seconds)
    # A message under the byte limit but far over the token limit: tokenized off the event loop.
    status, _, body, seconds = _chat(cluster, "alice", "word " * 200_000, session_id="big-1")
    assert (
        status == 400
        and body["error"]["message"].startswith("message is ")
        and "over the limit of 32768" in (body["error"]["message"])
    )
    status, _, body, _ = _chat(cluster, "alice", "x" * (1 << 20) + "y", session_id="big-2")
    assert (status, body["error"]["message"]) == (413, "message is over the limit of 1048576 bytes")
    for session_id in ("big-1", "big-2"):  # opened before their first turn failed
        assert _http(cluster, "DELETE", f"/v1/sessions/{session_id}", headers=_auth("alice"))[0] == 200
    with grpc.insecure_channel(f"127.0.0.1:{cluster.ports.scheduler}") as channel:
        malformed = channel.unary_unary("/agentserve.v1.Scheduler/OpenSession")
        code, details = _rpc_error(lambda: malformed(b"\x0f\xff\xff", metadata=_metadata("alice")))
        assert code == grpc.StatusCode.INVALID_ARGUMENT and details.startswith("malformed OpenSession request")
    assert http_health(cluster.ports.http) == (200, {"status": "ok"})
    assert "dropped engine" not in (cluster.log_dir / "scheduler.log").read_text()
    assert _chat(cluster, "alice", "Still serving?")[0] == 200
