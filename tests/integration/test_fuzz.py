"""Property-based fuzzing (hypothesis) of every client-facing HTTP route (the gateway's and the tool
proxy's) and every client gRPC method of the scheduler, against real services with API keys: only
defined statuses come back (never a 500, never UNKNOWN or INTERNAL), no request hangs, and the
services serve normally afterwards. Derandomized, so a run is reproducible."""

from __future__ import annotations

import http.client
import json
import re

import grpc
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from agentserve.cluster.readiness import http_health
from agentserve.v1 import common_pb2, scheduler_pb2, scheduler_pb2_grpc
from tests.support.cluster import local_cluster

pytestmark = pytest.mark.integration

KEY = "as-fuzz-key-0123456789abcdef"
AUTH = {"Authorization": f"Bearer {KEY}"}
AUTH_METADATA = (("authorization", f"Bearer {KEY}"),)
HTTP_STATUSES = {200, 400, 401, 404, 405, 413, 429}
GRPC_CODES = {
    grpc.StatusCode.OK,
    grpc.StatusCode.INVALID_ARGUMENT,
    grpc.StatusCode.NOT_FOUND,
    grpc.StatusCode.UNAUTHENTICATED,
    grpc.StatusCode.RESOURCE_EXHAUSTED,
}
TIMEOUT_S = 60.0  # a request not answered within this hung
FUZZ = settings(
    max_examples=60,
    deadline=None,
    derandomize=True,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    env = {"AGENTSERVE_API_KEYS": f"fuzz:{KEY}"}
    with local_cluster(tmp_path_factory, "fuzz", decoders=1, env=env) as running:
        yield running


# Small values where a valid request would generate: fuzzing must not turn into a long benchmark.
small_tokens = st.sampled_from([-1, 0, 1, 2, 3, 10**6, 2**31, "3", None, 1.5])
scalars = st.none() | st.booleans() | st.integers(-(2**40), 2**40) | st.floats() | st.text(max_size=40)
json_values = st.recursive(
    scalars, lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=10), inner, max_size=4)
)
roles = st.sampled_from(["system", "developer", "user", "assistant", "tool", "", "robot"])
content = st.none() | st.text(max_size=60) | st.lists(st.dictionaries(st.text(max_size=8), scalars, max_size=3))
messages = st.lists(st.fixed_dictionaries({"role": roles, "content": content}), max_size=4) | json_values
chat_bodies = st.fixed_dictionaries(
    {"messages": messages},
    optional={
        "model": st.sampled_from(["agentserve-tiny", "gpt-4o", ""]) | scalars,
        "max_tokens": small_tokens,
        "temperature": st.floats() | scalars,
        "top_p": st.floats(),
        "n": st.sampled_from([0, 1, 2, 17, -1]),
        "stream": st.booleans() | scalars,
        "stop": st.lists(st.text(max_size=5), max_size=6) | scalars,
        "logprobs": st.booleans() | scalars,
        "top_logprobs": st.integers(-2, 30),
        "seed": st.integers(-(2**70), 2**70),
        "tools": st.lists(json_values, max_size=2) | scalars,
        "tool_choice": st.sampled_from(["auto", "none", "required", {"type": "function"}]) | scalars,
        "response_format": st.sampled_from([{"type": "json_object"}, {"type": "text"}, {"type": "json_schema"}])
        | scalars,
        "ignore_eos": st.booleans(),
        "frequency_penalty": st.floats(),
    },
)
completion_bodies = st.fixed_dictionaries(
    {"prompt": st.text(max_size=60) | st.lists(st.integers(-5, 300_000), max_size=20) | scalars},
    optional={"max_tokens": small_tokens, "logprobs": st.integers(-1, 25) | scalars, "echo": st.booleans()},
)
header_text = st.text(st.characters(min_codepoint=0x21, max_codepoint=0x7E), min_size=1, max_size=140)
bodies = (
    st.binary(max_size=300)
    | json_values.map(lambda v: json.dumps(v).encode())
    | chat_bodies.map(lambda v: json.dumps(v).encode())
    | completion_bodies.map(lambda v: json.dumps(v).encode())
)


def _request(port: int, method: str, path: str, body: bytes | None, headers: dict[str, str]) -> int:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=TIMEOUT_S)
    try:
        conn.request(method, path, body=body, headers=headers)
        reply = conn.getresponse()
        raw = reply.read()
    finally:
        conn.close()
    if reply.getheader("Content-Type", "").startswith("application/json"):
        json.loads(raw)
    return reply.status


@FUZZ
@given(
    route=st.sampled_from(["/v1/chat/completions", "/v1/completions", "/v1/models", "/v1/sessions/"]),
    body=bodies,
    session_id=st.none() | header_text,
    authorized=st.sampled_from([True, True, True, False]),
)
def test_gateway_routes_answer_only_defined_statuses(cluster, route, body, session_id, authorized):
    headers = {"Content-Type": "application/json", **(AUTH if authorized else {})}
    if session_id is not None:
        headers["X-Session-Id"] = session_id
    method, path = {
        "/v1/models": ("GET", route),
        "/v1/sessions/": ("DELETE", route + re.sub(r"[^A-Za-z0-9._:-]", "_", session_id or "x")),
    }.get(route, ("POST", route))
    status = _request(cluster.ports.http, method, path, body if method == "POST" else None, headers)
    assert status in HTTP_STATUSES
    if not authorized:
        assert status == 401


@FUZZ
@given(
    name=st.sampled_from(["echo", "nope"])
    | st.text(st.characters(min_codepoint=0x30, max_codepoint=0x7A), max_size=20),
    body=st.binary(max_size=300) | json_values.map(lambda v: json.dumps(v).encode()),
    call_id=st.none() | header_text,
)
def test_tool_proxy_routes_answer_only_defined_statuses(cluster, name, body, call_id):
    name = name[:20]
    headers = {"Content-Type": "application/json", "X-Session-Id": "fuzz", **AUTH}
    if call_id is not None:
        headers["X-Call-Id"] = call_id
    status = _request(cluster.ports.toolproxy_http, "POST", f"/tools/{name or 'x'}", body, headers)
    assert status in HTTP_STATUSES


sampling = st.builds(
    common_pb2.SamplingParams,
    max_tokens=st.sampled_from([0, 1, 2, 3, 10**6, 2**32 - 1]),
    temperature=st.floats(width=32),
    top_p=st.floats(width=32),
    seed=st.none() | st.integers(0, 2**64 - 1),
    ignore_eos=st.booleans(),
    min_tokens=st.sampled_from([0, 1, 5, 2**32 - 1]),
    logprobs=st.none() | st.integers(0, 2**32 - 1),
    structured=st.builds(
        common_pb2.StructuredOutput,
        kind=st.integers(0, 4),
        schema=st.sampled_from(["", "{", "{}", '{"type": "object"}', '{"not": {}}']),
    ),
)
turns = st.builds(
    scheduler_pb2.TurnRequest,
    session_id=st.sampled_from(["OPEN", "OPEN", "f" * 32, ""]) | st.text(max_size=30),
    message=st.text(max_size=60),
    token_ids=st.lists(st.integers(0, 2**32 - 1), max_size=12),
    role=st.sampled_from(["user", "tool", "system", "assistant", ""]),
    sampling=sampling,
)
opens = st.builds(
    scheduler_pb2.OpenSessionRequest,
    tenant=st.sampled_from(["", "fuzz", "other"]),
    agent=st.text(max_size=20),
    parent_session_id=st.sampled_from(["", "OPEN", "missing"]),
    system_prompt=st.text(max_size=40),
)


@FUZZ
@given(
    call=st.one_of(
        st.tuples(st.just("Turn"), turns),
        st.tuples(st.just("OpenSession"), opens),
        st.tuples(
            st.just("CloseSession"), st.builds(scheduler_pb2.CloseSessionRequest, session_id=st.text(max_size=30))
        ),
        st.tuples(st.just("ListModels"), st.just(scheduler_pb2.ListModelsRequest())),
        st.tuples(st.sampled_from(["Turn", "OpenSession", "CloseSession", "ListModels"]), st.binary(max_size=200)),
    ),
    authorized=st.sampled_from([True, True, True, False]),
)
def test_scheduler_client_methods_answer_only_defined_codes(cluster, call, authorized):
    name, request = call
    metadata = AUTH_METADATA if authorized else ()
    with grpc.insecure_channel(f"127.0.0.1:{cluster.ports.scheduler}") as channel:
        stub = scheduler_pb2_grpc.SchedulerStub(channel)
        fields = [f for f in ("session_id", "parent_session_id") if getattr(request, f, None) == "OPEN"]
        if fields:  # a session of the key's tenant, opened for this request
            opened = stub.OpenSession(
                scheduler_pb2.OpenSessionRequest(), metadata=(("authorization", f"Bearer {KEY}"),)
            )
            for field in fields:
                setattr(request, field, opened.session_id)
        if isinstance(request, bytes):
            kind = channel.unary_stream if name == "Turn" else channel.unary_unary
            invoke = kind(f"/agentserve.v1.Scheduler/{name}")
        else:
            invoke = getattr(stub, name)
        code = grpc.StatusCode.OK
        try:
            result = invoke(request, metadata=metadata, timeout=TIMEOUT_S)
            if name == "Turn":
                list(result)
        except grpc.RpcError as exc:
            code = exc.code()
    assert code in GRPC_CODES, code
    if not authorized:
        assert code == grpc.StatusCode.UNAUTHENTICATED


def test_the_services_serve_normally_after_the_fuzzing(cluster):
    assert http_health(cluster.ports.http) == (200, {"status": "ok"})
    body = json.dumps({"prompt": "x", "max_tokens": 3, "ignore_eos": True}).encode()
    headers = {"Content-Type": "application/json", **AUTH}
    assert _request(cluster.ports.http, "POST", "/v1/completions", body, headers) == 200
    assert "dropped engine" not in (cluster.log_dir / "scheduler.log").read_text()
    assert "Traceback" not in (cluster.log_dir / "scheduler.log").read_text()
