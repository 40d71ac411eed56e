"""Two schedulers over shared state in etcd, behind HAProxy (`up --local --schedulers 2`).

Eight sessions of five turns run concurrently through the balancer's gRPC port. Each session's
turns run on the scheduler that holds its home key, whichever one HAProxy hands a call to (the
other forwards it). After every session's second turn one scheduler is SIGKILLed: its sessions'
third turns are served by the other once its lease lapses, every session finishes, every turn's
tokens are those of an undisturbed run (the tiny model recomputed here), every turn after the first
finds the history's KV in the store (the taken-over ones included), and etcd holds each session
once, with exactly its five turns: none forked, lost, or appended twice."""

from __future__ import annotations

import asyncio
import json
import random
import signal
import urllib.request

import grpc
import pytest

from agentserve.cluster.settings import ControlSettings
from agentserve.common.etcd import Etcd
from agentserve.scheduler.forwarding import SERVED_BY
from agentserve.scheduler.session_journal import decode_record
from agentserve.scheduler.shared_state import Keys
from agentserve.v1 import scheduler_pb2_grpc
from tests.support.cluster import local_cluster
from tests.support.grpc_turns import Conversation, assert_recomputed, open_sessions, run_concurrently

pytestmark = pytest.mark.integration

SESSIONS, TURNS, KILL_AFTER = 8, 5, 2
MAX_TOKENS = 4
LEASE_S = 2


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    options = {"control": ControlSettings(schedulers=2), "env": {"AGENTSERVE_ETCD_LEASE_S": str(LEASE_S)}}
    with local_cluster(tmp_path_factory, "schedulers", decoders=1, **options) as running:
        yield running


async def _etcd_state(address: str) -> tuple[dict, dict]:
    """Every session record and home key in etcd: (session id -> Session, session id -> scheduler id)."""
    etcd, keys = Etcd([address]), Keys("/agentserve/")
    try:
        records = await etcd.range(keys.prefix + b"sessions/", prefix=True)
        homes = await etcd.range(keys.prefix + b"homes/", prefix=True)
    finally:
        await etcd.close()
    sessions = [decode_record(kv.value) for kv in records]
    by_key = {kv.key: kv.value.decode() for kv in homes}
    return (
        {s.session_id: s for s in sessions},
        {
            s.session_id: by_key[keys.home(s.owner, s.session_id)]
            for s in sessions
            if keys.home(s.owner, s.session_id) in by_key
        },
    )


def _chat(port: int, session_id: str, messages: list[dict]) -> tuple[str, dict]:
    """(the scheduler that ran it, the reply) of a chat request with `X-Session-Id` to `port`."""
    body = json.dumps({"messages": messages, "max_tokens": MAX_TOKENS, "temperature": 0}).encode()
    request = urllib.request.Request(
        f"http://127.0.0.1:{port}/v1/chat/completions",
        data=body,
        headers={"Content-Type": "application/json", "X-Session-Id": session_id},
    )
    with urllib.request.urlopen(request, timeout=120) as reply:
        return reply.headers[SERVED_BY], json.loads(reply.read())


def test_http_sessions_run_on_their_home_whichever_scheduler_receives_them(cluster):
    ports = [cluster.scheduler_http_port(p.name) for p in cluster.schedulers] + [cluster.ports.http]
    conversations: dict[str, list[dict]] = {"roaming": [], "control": []}
    served: dict[str, set[str]] = {"roaming": set(), "control": set()}
    replies: dict[str, list[str]] = {"roaming": [], "control": []}
    for turn in range(3):
        for session_id in conversations:
            conversations[session_id].append({"role": "user", "content": f"Step {turn}: list the files."})
            # The roaming session's requests reach each scheduler and the balancer in turn; the
            # control session's always its first scheduler.
            port = ports[turn % len(ports)] if session_id == "roaming" else ports[0]
            by, reply = _chat(port, session_id, conversations[session_id])
            served[session_id].add(by)
            replies[session_id].append(reply["choices"][0]["message"]["content"])
            conversations[session_id].append({"role": "assistant", "content": replies[session_id][-1]})
    assert len(served["roaming"]) == 1  # every request ran on the session's home
    assert replies["roaming"] == replies["control"]
    records, _ = asyncio.run(_etcd_state(f"127.0.0.1:{cluster.ports.etcd}"))
    assert records["roaming"].turns == 3
    assert records["roaming"].client_state["replies"] == 3  # the gateway's progress, committed with each turn
    home = next(iter(served["roaming"]))
    elsewhere = next(p for p in cluster.schedulers if p.name != home)
    for session_id, port in (("roaming", cluster.scheduler_http_port(elsewhere.name)), ("control", ports[0])):
        close = urllib.request.Request(f"http://127.0.0.1:{port}/v1/sessions/{session_id}", method="DELETE")
        with urllib.request.urlopen(close, timeout=60) as reply:
            assert json.loads(reply.read())["turns"] == 3
    records, _ = asyncio.run(_etcd_state(f"127.0.0.1:{cluster.ports.etcd}"))
    assert records == {}


def test_a_scheduler_sigkilled_mid_session_loses_no_turn_and_forks_none(cluster, reference):
    rng = random.Random(34)
    conversations = [
        Conversation([[rng.randrange(5, 8000) for _ in range(rng.randrange(6, 12))] for _ in range(TURNS)])
        for _ in range(SESSIONS)
    ]
    etcd_address = f"127.0.0.1:{cluster.ports.etcd}"
    killed: dict[str, str] = {}  # session id -> the scheduler killed under it

    def kill() -> None:
        _, homes = asyncio.run(_etcd_state(etcd_address))
        # The calls went round-robin through HAProxy, yet each session's turns ran on its home.
        for conversation in conversations:
            assert set(conversation.served_by) == {homes[conversation.session_id]}
        victim = homes[conversations[0].session_id]
        killed.update({c.session_id: victim for c in conversations if homes[c.session_id] == victim})
        proc = next(p for p in cluster.procs if p.name == victim)
        proc.popen.send_signal(signal.SIGKILL)
        assert proc.popen.wait(timeout=30) == -signal.SIGKILL

    with grpc.insecure_channel(f"127.0.0.1:{cluster.ports.scheduler}") as channel:
        stub = scheduler_pb2_grpc.SchedulerStub(channel)
        open_sessions(stub, conversations, "ha")
        run_concurrently(stub, conversations, MAX_TOKENS, KILL_AFTER, kill)

    victim = killed[conversations[0].session_id]
    survivor = next(p.name for p in cluster.schedulers if p.name != victim)
    assert 0 < len(killed) < SESSIONS  # HAProxy spread the sessions over both schedulers
    records, homes = asyncio.run(_etcd_state(etcd_address))
    assert sorted(records) == sorted(c.session_id for c in conversations)  # none lost, none forked
    for conversation in conversations:
        assert conversation.served_by[KILL_AFTER:] == [survivor] * (TURNS - KILL_AFTER)
        assert homes[conversation.session_id] == survivor
        # Each turn recomputed exactly, the taken-over ones included, and each a store hit of the history.
        history = assert_recomputed(conversation, reference, MAX_TOKENS)
        record = records[conversation.session_id]
        assert (record.turns, record.history) == (TURNS, history)  # each turn committed exactly once
        if conversation.session_id in killed:
            # Taken over within the lease (the wait for it is bounded by two) plus the turn itself.
            assert conversation.seconds[KILL_AFTER] < 2 * LEASE_S + 10
