"""The closed internal plane, on real processes (`LocalCluster`, mutual TLS on as `up --local` runs
it): a caller without a certificate of the deployment's CA (plain, or another CA's) cannot read,
write or delete KV, register an engine, prefill or generate; engine registration is not on the
client port; and with the plane closed the system serves turns token-for-token equal to a full
recompute, cache hits included (store reads, handoffs and registration all run over mutual TLS).
A certificate of the deployment but of the wrong role (an operator's `client`, the tool proxy's) is
PERMISSION_DENIED on every method its role does not call (`common/internal_roles.py`)."""

from __future__ import annotations

import random
import socket
import time
from collections.abc import Callable

import grpc
import pytest

from agentserve.common.certs import ensure_certs
from agentserve.common.internal_tls import InternalTLS
from agentserve.contracts import SamplingParams
from agentserve.kvstore.config import KVStoreConfig
from agentserve.sdk import Client
from agentserve.v1 import (
    common_pb2,
    decode_pb2,
    decode_pb2_grpc,
    kvstore_pb2,
    kvstore_pb2_grpc,
    prefill_pb2,
    prefill_pb2_grpc,
    scheduler_pb2_grpc,
    toolproxy_pb2,
    toolproxy_pb2_grpc,
)
from tests.support.tails import cached_history

pytestmark = pytest.mark.integration

BLOCK = 16


@pytest.fixture(scope="module")
def cluster(shared_cluster_one_decode):
    return shared_cluster_one_decode


@pytest.fixture(scope="module")
def foreign(tmp_path_factory) -> InternalTLS:
    """A certificate of another CA: what an attacker who runs `agentserve certs` themselves holds."""
    root = tmp_path_factory.mktemp("foreign-certs")
    ensure_certs(root, ["client"])
    return InternalTLS.load(str(root / "client"))


def _channel(port: int, tls: InternalTLS | None) -> grpc.Channel:
    target = f"127.0.0.1:{port}"
    if tls is None:
        return grpc.insecure_channel(target)
    return grpc.secure_channel(target, tls.channel_credentials(), options=tls.channel_options())


def _engine_status(engine_id: str) -> common_pb2.EngineStatus:
    return common_pb2.EngineStatus(
        engine_id=engine_id,
        role=common_pb2.ENGINE_ROLE_DECODE,
        address="127.0.0.1:1",
        model_fingerprint="fp",
        block_size=BLOCK,
        vocab_size=8192,
        max_context=2048,
    )


def _code(call: Callable[[], object]) -> grpc.StatusCode:
    try:
        call()
    except grpc.RpcError as exc:
        return exc.code()
    return grpc.StatusCode.OK


def _internal_calls(cluster) -> dict[str, tuple[int, Callable[[grpc.Channel], object]]]:
    """label -> (port, call on a channel to it, streams read to the end): each a harm the plane
    must prevent (reading, forging or deleting KV, joining as an engine, making a prefill dial an
    address of the caller's choice, generating on an engine directly)."""
    ports = cluster.ports
    block = b"\x01" * 16
    intruder = _engine_status("intruder")
    return {
        "kvstore Get": (
            ports.kvstore,
            lambda c: list(kvstore_pb2_grpc.KVStoreStub(c).Get(kvstore_pb2.GetRequest(block_ids=[block]), timeout=10)),
        ),
        "kvstore Read": (
            ports.kvstore,
            lambda c: list(
                kvstore_pb2_grpc.KVStoreStub(c).Read(kvstore_pb2.ReadRequest(block_ids=[block]), timeout=10)
            ),
        ),
        "kvstore Put": (
            ports.kvstore,
            lambda c: kvstore_pb2_grpc.KVStoreStub(c).Put(kvstore_pb2.PutRequest(), timeout=10),
        ),
        "kvstore Delete": (
            ports.kvstore,
            lambda c: kvstore_pb2_grpc.KVStoreStub(c).Delete(kvstore_pb2.DeleteRequest(block_ids=[block]), timeout=10),
        ),
        "scheduler Register": (
            ports.scheduler_internal,
            lambda c: scheduler_pb2_grpc.SchedulerInternalStub(c).Register(intruder, timeout=10),
        ),
        "prefill Prefill": (
            ports.prefill,
            lambda c: prefill_pb2_grpc.PrefillStub(c).Prefill(
                prefill_pb2.PrefillRequest(token_ids=[1, 2, 3], decode_address="127.0.0.1:1"), timeout=10
            ),
        ),
        "decode Generate": (
            ports.decode_ports[0],
            lambda c: list(
                decode_pb2_grpc.DecodeStub(c).Generate(decode_pb2.GenerateRequest(token_ids=[1, 2, 3]), timeout=10)
            ),
        ),
        "toolproxy ListTools": (
            ports.toolproxy_grpc,
            lambda c: toolproxy_pb2_grpc.ToolProxyStub(c).ListTools(toolproxy_pb2.ListToolsRequest(), timeout=10),
        ),
    }


def test_no_internal_method_answers_a_caller_without_a_deployment_certificate(cluster, foreign):
    outcomes = {}
    for label, (port, call) in _internal_calls(cluster).items():
        for who, tls in (("plain", None), ("another CA", foreign)):
            with _channel(port, tls) as channel:
                outcomes[label, who] = _code(lambda call=call, channel=channel: call(channel))
    assert outcomes == {key: grpc.StatusCode.UNAVAILABLE for key in outcomes}
    # The intruder never registered: the scheduler routes to the one decode engine it started.
    with Client(f"127.0.0.1:{cluster.ports.scheduler}") as client, client.open_session() as session:
        assert session.turn(token_ids=[5, 6, 7], max_tokens=2, ignore_eos=True).result().token_ids


def test_a_deployment_certificate_reaches_the_internal_plane(cluster):
    client = cluster.internal_client()
    with _channel(cluster.ports.kvstore, client) as channel:
        stats = kvstore_pb2_grpc.KVStoreStub(channel).Stats(kvstore_pb2.StatsRequest(), timeout=10)
    with _channel(cluster.ports.scheduler_internal, cluster.internal_client("decode")) as channel:
        unknown = scheduler_pb2_grpc.SchedulerInternalStub(channel).Heartbeat(
            _engine_status("never-registered"), timeout=10
        )
    with _channel(cluster.ports.toolproxy_grpc, client) as channel:
        tools = toolproxy_pb2_grpc.ToolProxyStub(channel).ListTools(toolproxy_pb2.ListToolsRequest(), timeout=10)
    # The store answered with its own configuration: LocalCluster runs it with the default budgets.
    defaults = KVStoreConfig()
    assert [(t.tier, t.budget_bytes) for t in stats.tiers] == [
        (kvstore_pb2.TIER_DRAM, defaults.dram_budget_bytes),
        (kvstore_pb2.TIER_SSD, defaults.ssd_budget_bytes),
    ]
    assert unknown.known is False
    assert sorted(t.name for t in tools.tools) == ["echo", "sleep"]


def test_a_deployment_certificate_of_the_wrong_role_is_refused_by_name(cluster):
    """Mutual TLS says "one of ours"; the role table says what each of ours may do. An operator's
    `client` certificate (and a tool proxy's) may look but not act: every harmful call is
    PERMISSION_DENIED naming the method and who may call it, and the intruder never registers."""
    calls = _internal_calls(cluster)
    outcomes = {}
    for role in ("client", "toolproxy"):
        for label, (port, call) in calls.items():
            if label == "toolproxy ListTools":
                continue
            with _channel(port, cluster.internal_client(role)) as channel:
                try:
                    call(channel)
                    outcomes[label, role] = (grpc.StatusCode.OK, "")
                except grpc.RpcError as exc:
                    outcomes[label, role] = (exc.code(), exc.details())
    only = {
        "kvstore Get": "decode, prefill",
        "kvstore Read": "decode, prefill",
        "kvstore Put": "decode, prefill",
        "kvstore Delete": "scheduler",
        "scheduler Register": "decode, prefill",
        "prefill Prefill": "scheduler",
        "decode Generate": "scheduler",
    }
    method = {
        "kvstore Get": "KVStore/Get",
        "kvstore Read": "KVStore/Read",
        "kvstore Put": "KVStore/Put",
        "kvstore Delete": "KVStore/Delete",
        "scheduler Register": "SchedulerInternal/Register",
        "prefill Prefill": "Prefill/Prefill",
        "decode Generate": "Decode/Generate",
    }
    assert outcomes == {
        (label, role): (
            grpc.StatusCode.PERMISSION_DENIED,
            f"/agentserve.v1.{method[label]}: a '{role}' certificate may not call this internal method; "
            f"only {only[label]} may call it",
        )
        for label in only
        for role in ("client", "toolproxy")
    }
    assert "intruder" not in (cluster.log_dir / "scheduler.log").read_text()


def test_engine_registration_is_not_on_the_client_port(cluster):
    with grpc.insecure_channel(f"127.0.0.1:{cluster.ports.scheduler}") as channel:
        stub = scheduler_pb2_grpc.SchedulerInternalStub(channel)
        code = _code(lambda: stub.Register(common_pb2.EngineStatus(engine_id="intruder"), timeout=10))
    assert code is grpc.StatusCode.UNIMPLEMENTED


def test_every_internal_port_says_it_runs_mutual_tls(cluster):
    for name in ("kvstore", "prefill", "decode-0", "toolproxy"):
        log = (cluster.log_dir / f"{name}.log").read_text()
        assert "(internal plane, mutual TLS)" in log, name
    log = (cluster.log_dir / "scheduler.log").read_text()
    assert f"127.0.0.1:{cluster.ports.scheduler_internal} (internal plane, mutual TLS)" in log
    assert f":{cluster.ports.scheduler} (clients, plain)" in log


def test_turns_over_the_closed_plane_match_a_full_recompute_and_hit_the_cache(cluster, reference):
    rng = random.Random(15)
    turns = [[rng.randrange(5, 8000) for _ in range(n)] for n in (70, 41)]
    max_tokens = 12
    params = SamplingParams(max_tokens=max_tokens, ignore_eos=True)
    history: list[int] = []
    with Client(f"127.0.0.1:{cluster.ports.scheduler}") as client, client.open_session() as session:
        for i, new_tokens in enumerate(turns):
            prompt = history + new_tokens
            result = session.turn(token_ids=new_tokens, max_tokens=max_tokens, ignore_eos=True).result()
            assert result.token_ids == reference.generate(prompt, params).output_token_ids
            if i > 0:
                assert result.cached_tokens == cached_history(len(history), BLOCK)
            history = prompt + result.token_ids


def _prefill_to(cluster, decode_address: str = "", relay_address: str = "") -> tuple[grpc.StatusCode, str]:
    """A prefill, asked as the scheduler asks, naming the given peers; (code, details)."""
    path = prefill_pb2.KV_PATH_B if relay_address else prefill_pb2.KV_PATH_A
    request = prefill_pb2.PrefillRequest(
        token_ids=list(range(5, 5 + 3 * BLOCK)),
        sampling=common_pb2.SamplingParams(max_tokens=1, ignore_eos=True),
        tenant="allow-list",
        store_hit_blocks=2 if relay_address else 0,
        decode_address=decode_address,
        kv_path=path,
        relay_address=relay_address,
    )
    with _channel(cluster.ports.prefill, cluster.internal_client("scheduler")) as channel:
        try:
            prefill_pb2_grpc.PrefillStub(channel).Prefill(request, timeout=30)
        except grpc.RpcError as exc:
            return exc.code(), exc.details()
    return grpc.StatusCode.OK, ""


def test_a_prefill_never_dials_an_address_the_scheduler_did_not_register(cluster, reference):
    """Even asked with the scheduler's own certificate, a prefill refuses a `decode_address` or
    `relay_address` that is not a registered decode engine, before opening any connection: a socket
    listening there never sees one. Turns, whose handoffs go to the registered engine, are exact."""
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen(8)
        listener.setblocking(False)
        target = f"127.0.0.1:{listener.getsockname()[1]}"
        refused = {field: _prefill_to(cluster, **{field: target}) for field in ("decode_address", "relay_address")}
        time.sleep(0.5)  # a dial in flight would have reached the listener by now
        with pytest.raises(BlockingIOError):
            listener.accept()
    assert refused == {
        field: (
            grpc.StatusCode.PERMISSION_DENIED,
            f"{field} {target!r} is not a decode engine registered with the scheduler; "
            "this engine dials only registered peers",
        )
        for field in ("decode_address", "relay_address")
    }
    # The registered decode engine is dialed: a prefill naming it hands off.
    decode = f"127.0.0.1:{cluster.ports.decode_ports[0]}"
    assert _prefill_to(cluster, decode_address=decode) == (grpc.StatusCode.OK, "")

    new_tokens = [random.Random(16).randrange(5, 8000) for _ in range(70)]
    with Client(f"127.0.0.1:{cluster.ports.scheduler}") as client, client.open_session() as session:
        result = session.turn(token_ids=new_tokens, max_tokens=8, ignore_eos=True).result()
    params = SamplingParams(max_tokens=8, ignore_eos=True)
    assert result.token_ids == reference.generate(new_tokens, params).output_token_ids
    assert result.metadata.handoff_blocks + result.metadata.handoff_held_blocks == 70 // BLOCK + 1  # and the tail
