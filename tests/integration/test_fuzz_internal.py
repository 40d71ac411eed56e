"""Property-based fuzzing (hypothesis) of every method of the internal services (the kvstore, the
decode and prefill engines, the scheduler's internal API, the tool proxy's gRPC), called as a
deployment peer would (mutual TLS with the certificate of the role that calls the method, as
`up --local` runs the plane): random bytes for each request message and near-valid messages. Only defined statuses
come back (never UNKNOWN or INTERNAL), no call hangs, and the system serves normally afterwards.
Derandomized, so a run is reproducible."""

from __future__ import annotations

import grpc
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from agentserve.common.internal_roles import CALLERS
from agentserve.sdk import Client
from agentserve.v1 import common_pb2, decode_pb2, kvstore_pb2, prefill_pb2, scheduler_pb2, toolproxy_pb2
from tests.support.cluster import local_cluster

pytestmark = pytest.mark.integration

# What a peer may get back. PERMISSION_DENIED: a prefill told to hand off to or relay through an
# address that is not a registered decode engine (peer_allowlist.py); UNAVAILABLE: one told to use a
# registered address (a fuzzed Register made it one) where no engine runs; DEADLINE_EXCEEDED: a
# fuzzed Generate that asks for many tokens and is still producing them at the deadline (work, not a
# hang: the engine is cancelled).
DEFINED = {
    grpc.StatusCode.OK,
    grpc.StatusCode.INVALID_ARGUMENT,
    grpc.StatusCode.NOT_FOUND,
    grpc.StatusCode.FAILED_PRECONDITION,
    grpc.StatusCode.RESOURCE_EXHAUSTED,
    grpc.StatusCode.OUT_OF_RANGE,
}
ALSO_DEFINED = {
    "/agentserve.v1.Prefill/Prefill": {
        grpc.StatusCode.PERMISSION_DENIED,
        grpc.StatusCode.UNAVAILABLE,
        grpc.StatusCode.DEADLINE_EXCEEDED,
    },
    "/agentserve.v1.Decode/Generate": {grpc.StatusCode.DEADLINE_EXCEEDED},
    "/agentserve.v1.Decode/RelayKV": {grpc.StatusCode.UNAVAILABLE},
}
TIMEOUT_S = 30.0  # a call not answered within this hung
FUZZ = settings(
    max_examples=60,
    deadline=None,
    derandomize=True,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
SERVICES = {  # proto module, service -> the cluster's port for it
    (kvstore_pb2, "KVStore"): lambda ports: ports.kvstore,
    (decode_pb2, "Decode"): lambda ports: ports.decode_ports[0],
    (prefill_pb2, "Prefill"): lambda ports: ports.prefill,
    (scheduler_pb2, "SchedulerInternal"): lambda ports: ports.scheduler_internal,
    (toolproxy_pb2, "ToolProxy"): lambda ports: ports.toolproxy_grpc,
}
MODULES = {service: module for module, service in SERVICES}
METHODS = [
    (module, service, method.name)
    for module, service in SERVICES
    for method in module.DESCRIPTOR.services_by_name[service].methods
]


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    with local_cluster(tmp_path_factory, "fuzz-internal", decoders=1) as running:
        yield running


def _caller(service: str, name: str) -> str:
    """The role whose certificate calls `service/name` (internal_roles.py): the servicer, not the
    role check, is what is fuzzed."""
    return min(CALLERS[f"/agentserve.v1.{service}/{name}"])


@pytest.fixture(scope="module")
def channels(cluster):
    """(service, role) -> a channel to the service presenting that role's certificate."""
    opened = {}
    for module, service in SERVICES:
        roles = {_caller(service, method.name) for method in module.DESCRIPTOR.services_by_name[service].methods}
        for role in roles:
            tls = cluster.internal_client(role)
            target = f"127.0.0.1:{SERVICES[module, service](cluster.ports)}"
            opened[service, role] = grpc.secure_channel(
                target, tls.channel_credentials(), options=tls.channel_options()
            )
    yield opened
    for channel in opened.values():
        channel.close()


def _call(channel: grpc.Channel, module, service: str, name: str, requests: list[bytes]) -> grpc.StatusCode:
    """Invoke `service/name` with already-serialized request(s), reading any response stream to its end."""
    method = module.DESCRIPTOR.services_by_name[service].methods_by_name[name]
    path = f"/{method.containing_service.full_name}/{name}"
    kind = {
        (False, False): channel.unary_unary,
        (False, True): channel.unary_stream,
        (True, False): channel.stream_unary,
        (True, True): channel.stream_stream,
    }[method.client_streaming, method.server_streaming]
    invoke = kind(path, request_serializer=None, response_deserializer=None)
    try:
        result = invoke(iter(requests) if method.client_streaming else requests[0], timeout=TIMEOUT_S)
        if method.server_streaming:
            list(result)
    except grpc.RpcError as exc:
        return exc.code()
    return grpc.StatusCode.OK


def _assert_defined(code: grpc.StatusCode, service: str, name: str) -> None:
    path = f"/agentserve.v1.{service}/{name}"
    assert code in DEFINED | ALSO_DEFINED.get(path, set()), (path, code)


@settings(FUZZ, max_examples=120)  # ~5 per method
@given(method=st.sampled_from(METHODS), requests=st.lists(st.binary(max_size=200), min_size=1, max_size=3))
def test_random_bytes_to_every_internal_method_answer_only_defined_codes(channels, method, requests):
    module, service, name = method
    channel = channels[service, _caller(service, name)]
    _assert_defined(_call(channel, module, service, name, requests), service, name)


block_ids = st.lists(st.binary(min_size=0, max_size=40), max_size=6)
small_sampling = st.builds(
    common_pb2.SamplingParams,
    max_tokens=st.sampled_from([0, 1, 2, 3, 2**32 - 1]),
    temperature=st.floats(width=32),
    top_p=st.floats(width=32),
    ignore_eos=st.booleans(),
)
tokens = st.lists(st.integers(0, 2**32 - 1), max_size=24)
kv_blocks = st.builds(common_pb2.KVBlock, block_id=st.binary(max_size=20), data=st.binary(max_size=300))
addresses = st.sampled_from(["", "127.0.0.1:1", "nohost", "256.1.1.1:99999", ":"])
messages = st.one_of(
    st.tuples(st.just(("KVStore", "Lookup")), st.builds(kvstore_pb2.LookupRequest, block_ids=block_ids)),
    st.tuples(st.just(("KVStore", "Get")), st.builds(kvstore_pb2.GetRequest, block_ids=block_ids)),
    st.tuples(
        st.just(("KVStore", "Read")),
        st.builds(
            kvstore_pb2.ReadRequest,
            block_ids=block_ids,
            layer_start=st.integers(0, 2**32 - 1),
            layer_stop=st.integers(0, 2**32 - 1),
        ),
    ),
    st.tuples(
        st.just(("KVStore", "Put")),
        st.builds(
            kvstore_pb2.PutRequest,
            model_fingerprint=st.text(max_size=20),
            blocks=st.lists(
                st.builds(common_pb2.KVBlock, block_id=st.binary(max_size=20), data=st.binary(max_size=300)), max_size=3
            ),
        ),
    ),
    st.tuples(st.just(("KVStore", "Pin")), st.builds(kvstore_pb2.PinRequest, block_ids=block_ids)),
    st.tuples(st.just(("KVStore", "Delete")), st.builds(kvstore_pb2.DeleteRequest, block_ids=block_ids)),
    st.tuples(
        st.sampled_from([("Decode", "Lookup"), ("Decode", "DropKV"), ("Decode", "PrefetchKV")]),
        st.builds(decode_pb2.HeldBlocksRequest, block_ids=block_ids),
    ),
    st.tuples(
        st.just(("Decode", "RelayKV")),
        st.builds(decode_pb2.RelayRequest, block_ids=block_ids, dst=st.text(max_size=20)),
    ),
    st.tuples(
        st.just(("Decode", "Generate")),
        st.builds(decode_pb2.GenerateRequest, token_ids=tokens, sampling=small_sampling, tenant=st.text(max_size=8)),
    ),
    st.tuples(
        st.just(("Prefill", "Prefill")),
        st.builds(
            prefill_pb2.PrefillRequest,
            token_ids=tokens,
            sampling=small_sampling,
            store_hit_blocks=st.integers(0, 2**32 - 1),
            decode_address=addresses,
            relay_address=addresses,
            relay_blocks=st.integers(0, 2**32 - 1),
            kv_path=st.integers(0, 5),
        ),
    ),
    st.tuples(
        st.sampled_from([("SchedulerInternal", "Register"), ("SchedulerInternal", "Heartbeat")]),
        st.builds(
            common_pb2.EngineStatus,
            engine_id=st.text(max_size=12),
            role=st.integers(0, 3),
            address=addresses,
            model_fingerprint=st.text(max_size=12),
            block_size=st.integers(0, 2**32 - 1),
            vocab_size=st.integers(0, 2**32 - 1),
            max_context=st.integers(0, 2**32 - 1),
        ),
    ),
    st.tuples(
        st.sampled_from([("SchedulerInternal", "ToolCallStarted"), ("SchedulerInternal", "ToolCallFinished")]),
        st.builds(
            scheduler_pb2.ToolCallEvent,
            session_id=st.text(max_size=34),
            tool=st.text(max_size=12),
            call_id=st.text(max_size=12),
            predicted_duration_s=st.floats(width=32),
            actual_duration_s=st.floats(width=32),
        ),
    ),
)


@FUZZ
@given(message=messages)
def test_near_valid_messages_to_internal_methods_answer_only_defined_codes(channels, message):
    (service, name), request = message
    channel = channels[service, _caller(service, name)]
    code = _call(channel, MODULES[service], service, name, [request.SerializeToString()])
    _assert_defined(code, service, name)


def test_the_system_serves_normally_after_the_fuzzing(cluster):
    with Client(f"127.0.0.1:{cluster.ports.scheduler}") as client, client.open_session() as session:
        assert len(session.turn(token_ids=[5, 6, 7, 8], max_tokens=3, ignore_eos=True).result().token_ids) == 3
    for name in ("scheduler", "kvstore", "prefill", "decode-0", "toolproxy"):
        log = (cluster.log_dir / f"{name}.log").read_text()
        assert "Traceback" not in log, name
    assert "dropped engine" not in (cluster.log_dir / "scheduler.log").read_text()
