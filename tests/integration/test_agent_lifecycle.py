"""The agentserve KV lifecycle through the whole system (LocalCluster, the SDK, the tool proxy's
built-in `sleep` tool): a session's KV leaves its decode engine while it waits on a tool and is
uploaded again before the predicted return, and every turn's greedy tokens equal a full recompute:

- a predicted wait: dropped from the holder, uploaded back, the next turn finds all of it held;
- the holder dies during the wait: the upload goes to the other decode engine, which serves on;
- tools 10x longer and 10x shorter than predicted: same tokens (late upload / on-demand load).
"""

from __future__ import annotations

import random
import threading
import time
import urllib.request

import grpc
import pytest

from agentserve.contracts import SamplingParams
from agentserve.kv.block_hash import block_ids_for
from agentserve.sdk import Client
from agentserve.v1 import decode_pb2, decode_pb2_grpc
from tests.support.cluster import local_cluster

pytestmark = pytest.mark.integration

MAX_TOKENS = 16
TENANT = "lifecycle"
_rng = random.Random(14)
TURNS = [[_rng.randrange(5, 8000) for _ in range(n)] for n in (70, 25, 30)]
SCHEDULER_ENV = {
    "AGENTSERVE_KV_LIFECYCLE": "agentserve",
    # What reloading a block costs here (RPC, store read, import), with room to spare on a shared,
    # loaded machine: the upload starts 1.5 reloads before the earliest predicted return.
    "AGENTSERVE_RELOAD_S_PER_BLOCK": "0.1",
    "AGENTSERVE_PARK_MIN_WAIT_S": "0.2",
}


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    with local_cluster(tmp_path_factory, "lifecycle", decoders=2, env=SCHEDULER_ENV) as running:
        yield running


def _client(cluster) -> Client:
    return Client(
        f"127.0.0.1:{cluster.ports.scheduler}", f"http://127.0.0.1:{cluster.ports.toolproxy_http}", timeout_s=120
    )


def _held(cluster, block_ids: list[bytes]) -> dict[int, int]:
    """Decode port -> how many of `block_ids` that engine holds."""
    counts = {}
    for port in cluster.ports.decode_ports:
        with cluster.internal_channel(port) as channel:
            try:
                reply = decode_pb2_grpc.DecodeStub(channel).Lookup(
                    decode_pb2.HeldBlocksRequest(block_ids=block_ids), timeout=10
                )
                counts[port] = sum(reply.held)
            except grpc.RpcError:
                counts[port] = -1  # not serving (killed)
    return counts


def _holding_all(cluster, block_ids: list[bytes]) -> int | None:
    """The port of a decode engine holding every one of `block_ids`, if any."""
    return next((port for port, count in _held(cluster, block_ids).items() if count == len(block_ids)), None)


def _wait_for(predicate, timeout_s: float, what: str):
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(0.05)
    raise AssertionError(f"timed out waiting for {what}")


def _parking_counts(cluster) -> dict[str, float]:
    """The scheduler's KV parking actions so far, from its /metrics."""
    with urllib.request.urlopen(f"http://127.0.0.1:{cluster.ports.metrics}/metrics", timeout=10) as reply:
        text = reply.read().decode()
    counts = {}
    for line in text.splitlines():
        if line.startswith('agentserve_scheduler_kv_parking_total{action="'):
            labels, value = line.rsplit(" ", 1)
            counts[labels.split('"')[1]] = float(value)
    return counts


def _port(engine_id: str) -> int:
    return int(engine_id.rsplit(":", 1)[1])  # engine ids are role-host:port


def _check_tokens(reference, results) -> list[int]:
    params = SamplingParams(max_tokens=MAX_TOKENS, ignore_eos=True)
    history: list[int] = []
    for i, result in enumerate(results):
        prompt = history + TURNS[i]
        assert result.prompt_tokens == len(prompt)
        assert result.token_ids == reference.generate(prompt, params).output_token_ids, f"turn {i + 1}"
        history = prompt + result.token_ids
    return history


def _call_in_background(session, seconds: float, predicted_s: float) -> threading.Event:
    """Call the `sleep` tool on another thread (the SDK's loop runs it) while this one watches the
    engines; the event is set when the call returned."""
    returned = threading.Event()

    def call() -> None:
        session.call_tool("sleep", {"seconds": seconds}, predicted_s=predicted_s)
        returned.set()

    threading.Thread(target=call, daemon=True).start()
    return returned


def _turn(session, i):
    return session.turn(token_ids=TURNS[i], max_tokens=MAX_TOKENS, ignore_eos=True).result()


def test_offloaded_during_a_tool_and_uploaded_before_the_return(cluster, reference):
    with _client(cluster) as client, client.open_session(tenant=TENANT, agent="coder", priority=5) as session:
        first = _turn(session, 0)
        history = TURNS[0] + first.token_ids
        ids = block_ids_for(history, reference.block_size, reference.fingerprint, TENANT)
        holder = _port(first.metadata.decode_engine)
        assert _held(cluster, ids)[holder] == len(ids)
        session.call_tool("sleep", {"seconds": 0.1}, predicted_s=0.1)  # too short to park
        assert _held(cluster, ids)[holder] == len(ids)

        # A 5 s wait, predicted: parked at once, back on an engine before the call returns.
        returned = _call_in_background(session, 5.0, 5.0)
        _wait_for(lambda: all(n == 0 for n in _held(cluster, ids).values()), 4.0, "the KV to leave the engines")
        uploaded_to = _wait_for(lambda: _holding_all(cluster, ids), 6.0, "the upload")
        assert not returned.is_set(), "the upload must land before the tool returns"
        assert returned.wait(10)
        second = _turn(session, 1)
        assert _port(second.metadata.decode_engine) == uploaded_to  # the turn went where its KV was
        third = _turn(session, 2)
    _check_tokens(reference, [first, second, third])


@pytest.mark.parametrize(
    "predicted, actual, uploads",
    [(1.5, 15.0, 2), (15.0, 1.5, 0)],  # 10x longer (uploaded early, kept), 10x shorter (loaded on demand)
    ids=["10x-longer", "10x-shorter"],
)
def test_mispredicted_tools_give_identical_tokens(cluster, reference, predicted, actual, uploads):
    before = _parking_counts(cluster)
    with _client(cluster) as client, client.open_session(tenant=TENANT, agent="writer") as session:
        results = [_turn(session, 0)]
        session.call_tool("sleep", {"seconds": actual}, predicted_s=predicted)
        results.append(_turn(session, 1))
        session.call_tool("sleep", {"seconds": actual}, predicted_s=predicted)
        results.append(_turn(session, 2))
    _check_tokens(reference, results)
    after = _parking_counts(cluster)
    moved = {action: after.get(action, 0) - before.get(action, 0) for action in after}
    assert moved.get("offload") == 2 and moved.get("upload", 0) == uploads
    assert moved.get("upload_cancelled", 0) == 2 - uploads and moved.get("failure", 0) == 0


def test_the_upload_goes_to_another_engine_when_the_holder_dies(cluster, reference):
    with _client(cluster) as client, client.open_session(tenant=TENANT, agent="searcher") as session:
        first = _turn(session, 0)
        holder = _port(first.metadata.decode_engine)
        history = TURNS[0] + first.token_ids
        ids = block_ids_for(history, reference.block_size, reference.fingerprint, TENANT)
        returned = _call_in_background(session, 9.0, 9.0)
        _wait_for(lambda: _held(cluster, ids)[holder] == 0, 6.0, "the KV to leave its holder")
        proc = next(p for p in cluster.procs if p.name.startswith("decode") and p.grpc_port == holder)
        proc.popen.kill()
        proc.popen.wait()
        other = next(port for port in cluster.ports.decode_ports if port != holder)
        _wait_for(lambda: _held(cluster, ids)[other] == len(ids), 20.0, "the upload to the other engine")
        assert returned.wait(20)
        second = _turn(session, 1)
        assert _port(second.metadata.decode_engine) == other
        third = _turn(session, 2)
    cluster.respawn(proc.name)
    _check_tokens(reference, [first, second, third])
