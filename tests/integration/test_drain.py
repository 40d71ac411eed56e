"""Scale-in under `agentserve up --local`: a decode engine drained while a session's turn runs on
it (by the scheduler, as `agentserve drain` asks, or by its own SIGTERM, as compose's scale-in
sends it) finishes that turn, deregisters and exits (and `up` does not restart it); the session's
next turn runs on another engine, loads the drained engine's KV from the store, and is
token-identical to the same turns run undisturbed. `agentserve drain` drains an idle engine and
waits for it; bad names, the last engine of a role and a certificate of another role are refused
by name."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
from collections.abc import Callable

import grpc
import pytest

from agentserve.common.internal_tls import InternalTLS
from agentserve.sdk import Client
from agentserve.v1 import scheduler_pb2, scheduler_pb2_grpc
from tests.integration.test_up_local import UpLocal, _service

pytestmark = pytest.mark.integration

PROMPTS = ([11, 12, 13, 14, 15, 16, 17, 18, 19, 20], [30, 31, 32], [40, 41, 42, 43])
# The second turn is long, so the drain surely lands while it runs.
MAX_TOKENS = (20, 160, 12)


@pytest.fixture
def up(tmp_path):
    running = UpLocal(tmp_path, decoders=4)
    try:
        yield running
    finally:
        running.kill_tree()


def _cli(*args: str) -> subprocess.CompletedProcess:
    cmd = [sys.executable, "-m", "agentserve.cli.main", "drain", *args]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=180)


def _pid(up: UpLocal, engine: str) -> int:
    """The process of the engine whose id ends in its port (`decode-127.0.0.1:PORT`)."""
    port = engine.rsplit(":", 1)[1]
    return next(pid for pid, cmd in up.children().items() if port in cmd and _service(cmd) == "agentserve.decode")


def _decode_pids(up: UpLocal) -> set[int]:
    return {pid for pid, cmd in up.children().items() if _service(cmd) == "agentserve.decode"}


def _drain_rpc(scheduler: str, certs: str, role: str, engine: str) -> scheduler_pb2.DrainEngineResponse:
    tls = InternalTLS.load(f"{certs}/{role}")
    with grpc.secure_channel(scheduler, tls.channel_credentials(), options=tls.channel_options()) as channel:
        return scheduler_pb2_grpc.SchedulerInternalStub(channel).DrainEngine(
            scheduler_pb2.DrainEngineRequest(engine=engine), timeout=30
        )


def _session(client: Client, tenant: str, disturb: Callable[[str], None]) -> list:
    """The three turns of `PROMPTS` in a session of `tenant`, calling `disturb(holder)` once the
    second turn runs on the session's decode engine (`holder`, the first turn's)."""
    session = client.open_session(tenant=tenant)
    first = session.turn(token_ids=list(PROMPTS[0]), max_tokens=MAX_TOKENS[0], ignore_eos=True).result()
    running = session.turn(token_ids=list(PROMPTS[1]), max_tokens=MAX_TOKENS[1], ignore_eos=True)
    next(iter(running))  # the turn is on its decode engine
    disturb(first.metadata.decode_engine)
    second = running.result()  # the drained engine finishes the turn it has
    third = session.turn(token_ids=list(PROMPTS[2]), max_tokens=MAX_TOKENS[2], ignore_eos=True).result()
    return [first, second, third]


def test_a_drained_engine_finishes_its_turn_leaves_and_the_session_continues_token_identical(up):
    ready = up.wait_for(lambda: re.search(r"gRPC 127\.0\.0\.1:(\d+)", up.stderr), "ready line")
    hint = up.wait_for(lambda: re.search(r"--scheduler (127\.0\.0\.1:\d+) --tls-dir (\S+)/operator", up.stderr), "hint")
    scheduler, certs = hint.group(1), hint.group(2)
    scheduler_log = up.log_dir / "scheduler.log"
    up.wait_for(lambda: scheduler_log.read_text().count("registered decode engine") == 4, "four decode engines")

    def left(engine: str, decoders: int) -> None:
        """`engine` deregistered and exited, and `up` did not restart it."""
        up.wait_for(lambda: f"deregistered drained decode engine {engine}" in scheduler_log.read_text(), "leave", 60)
        up.wait_for(lambda: up.stderr.count("drained and exited; not restarting it") == 4 - decoders, "exit", 60)
        assert len(_decode_pids(up)) == decoders

    client = Client(f"127.0.0.1:{ready.group(1)}", timeout_s=120)
    try:
        # Tenants apart: blocks are salted per tenant, so no session finds another's cached.
        undisturbed = client.open_session(tenant="undisturbed")
        reference = [
            undisturbed.turn(token_ids=list(p), max_tokens=n, ignore_eos=True).result().token_ids
            for p, n in zip(PROMPTS, MAX_TOKENS, strict=True)
        ]

        # Drained by the scheduler (what `agentserve drain` asks), while the turn runs on it.
        busy: list[int] = []
        turns = _session(
            client, "drained", lambda holder: busy.append(_drain_rpc(scheduler, certs, "operator", holder).busy)
        )
        holder = turns[0].metadata.decode_engine
        assert busy[0] >= 1  # the turn was on the engine when the drain came
        left(holder, 3)
        assert [t.token_ids for t in turns] == reference
        assert turns[1].metadata.decode_engine == holder and turns[2].metadata.decode_engine != holder
        # The second turn's output blocks exist only where the drained engine persisted them.
        assert turns[2].metadata.loaded_blocks > 0

        # SIGTERM to the engine, as compose's scale-in sends it: the same drain.
        turns = _session(client, "sigterm", lambda engine: os.kill(_pid(up, engine), signal.SIGTERM))
        terminated = turns[0].metadata.decode_engine
        left(terminated, 2)
        assert [t.token_ids for t in turns] == reference
        assert turns[1].metadata.decode_engine == terminated and turns[2].metadata.decode_engine != terminated
        assert turns[2].metadata.loaded_blocks > 0

        # `agentserve drain` on an idle engine, waiting until it has left.
        gone = {holder, terminated}
        idle = next(
            e for e in re.findall(r"registered decode engine (\S+) at", scheduler_log.read_text()) if e not in gone
        )
        done = _cli(idle, "--scheduler", scheduler, "--tls-dir", f"{certs}/operator", "--wait")
        assert done.returncode == 0, done.stderr
        assert f"draining decode engine {idle}" in done.stdout
        assert f"{idle} finished its turns and deregistered" in done.stdout
        left(idle, 1)

        unknown = _cli(holder, "--scheduler", scheduler, "--tls-dir", f"{certs}/operator")
        assert unknown.returncode == 2
        assert f"NOT_FOUND: DrainEngineRequest.engine: no registered engine '{holder}'" in unknown.stderr
        last = re.search(r"registered: .*(decode-\S+?)[,)]", unknown.stderr).group(1)
        refused = _cli(last, "--scheduler", scheduler, "--tls-dir", f"{certs}/operator")
        assert refused.returncode == 2
        assert f"FAILED_PRECONDITION: engine {last} is the last decode engine taking turns" in refused.stderr
        with pytest.raises(grpc.RpcError) as denied:
            _drain_rpc(scheduler, certs, "client", last)  # a client certificate looks, never acts
        assert denied.value.code() is grpc.StatusCode.PERMISSION_DENIED

        after = client.open_session().turn(token_ids=[50, 51], max_tokens=4, ignore_eos=True).result()
        assert after.metadata.decode_engine == last
    finally:
        client.close()
