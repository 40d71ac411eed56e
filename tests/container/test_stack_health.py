"""The deployment as docker-compose.yml describes it: comes up healthy, answers on its published
loopback ports, exports traces to Phoenix, and grows by one decode engine with `--scale`."""

from __future__ import annotations

import json
import time
import urllib.request

import pytest

from agentserve.common.healthcheck import check
from tests.support.compose import ONE_SHOT, TEST_TIMEOUT_S, Stack
from tests.support.tails import cached_history

pytestmark = [pytest.mark.container, pytest.mark.timeout(TEST_TIMEOUT_S)]

DECODE_PORT = 50054
# Run inside a container: exit 0 when the gRPC server at argv[1] reports SERVING, asked over the
# internal plane's mutual TLS with the container's own certificate.
PROBE = (
    "import os, sys; from agentserve.common.healthcheck import check\n"
    "sys.exit(0 if check(sys.argv[1], tls_dir=os.environ['AGENTSERVE_INTERNAL_TLS_DIR']) else 1)"
)
ADVERTISED = "from agentserve.common.netutil import advertise_host; print(advertise_host(''))"


def test_every_service_runs_healthy(stack: Stack):
    by_service: dict[str, list[str]] = {}
    for c in stack.containers():
        if c.Service in ONE_SHOT:
            assert (c.State, c.ExitCode) == ("exited", 0), c.Name
            continue
        assert (c.State, c.Health) == ("running", "healthy"), c.Name
        by_service.setdefault(c.Service, []).append(c.Name)
    assert {s: len(names) for s, names in by_service.items()} == {
        "kvstore": 1,
        "scheduler": 1,
        "prefill": 1,
        "decode": 2,
        "toolproxy": 1,
        "tracing": 1,
    }


def test_scheduler_answers_on_published_ports(stack: Stack):
    assert check(stack.grpc_address)
    with urllib.request.urlopen(f"{stack.http_url}/v1/models", timeout=10) as response:
        models = json.loads(response.read())
    assert response.status == 200
    assert [m["id"] for m in models["data"]] == ["agentserve-tiny"]


def test_phoenix_api_answers(stack: Stack):
    with urllib.request.urlopen(f"{stack.phoenix_url}/v1/projects", timeout=10) as response:
        projects = json.loads(response.read())
    assert response.status == 200
    assert "default" in [p["name"] for p in projects["data"]]
    # The spans endpoint the trace tests read answers a filter that matches nothing with an empty page.
    no_trace = "0" * 32
    with urllib.request.urlopen(f"{stack.phoenix_url}/v1/projects/default/spans?trace_id={no_trace}", timeout=10) as r:
        page = json.loads(r.read())
    assert (r.status, page["data"]) == (200, [])


def test_scale_decode_adds_a_dialable_registered_engine(stack: Stack):
    before = {c.Name: c.ID for c in stack.containers("decode")}
    try:
        stack.scale("decode", 3)
        decodes = stack.containers("decode")
        assert [(c.State, c.Health) for c in decodes] == [("running", "healthy")] * 3
        # --no-recreate: the first two engines kept running, untouched.
        assert {c.Name: c.ID for c in decodes[:2]} == before

        # The new replica advertises its compute address; prefill and the scheduler reach it there.
        address = f"{stack.exec('decode', ['python', '-c', ADVERTISED], replica=3).strip()}:{DECODE_PORT}"
        for peer in ("prefill", "scheduler"):
            stack.exec(peer, ["python", "-c", PROBE, address])
        assert_registered(stack, address)
    finally:
        stack.scale("decode", 2)


def assert_registered(stack: Stack, address: str, timeout_s: float = 30.0) -> None:
    deadline = time.monotonic() + timeout_s
    while f"at {address}" not in stack.logs("scheduler"):
        assert time.monotonic() < deadline, f"scheduler never logged registering the engine at {address}"
        time.sleep(1)


STORE_STATS = (
    "import asyncio, os; from agentserve.kvstore.client import KVStoreClient\n"
    "from agentserve.common.internal_tls import InternalTLS\n"
    "tls = InternalTLS.load(os.environ['AGENTSERVE_INTERNAL_TLS_DIR'])\n"
    "async def main():\n"
    "    async with KVStoreClient('127.0.0.1:50052', tls=tls) as c:\n"
    "        print((await c.stats()).blocks)\n"
    "asyncio.run(main())"
)


def test_scale_kvstore_shards_blocks_and_sessions_still_hit(stack: Stack):
    from agentserve.sdk import Client

    try:
        stack.scale("kvstore", 2)
        # Engines and the scheduler re-resolve `kvstore` periodically; wait until both see two.
        time.sleep(35)
        before = [int(stack.exec("kvstore", ["python", "-c", STORE_STATS], replica=r)) for r in (1, 2)]
        with Client(stack.grpc_address, stack.toolproxy_url, timeout_s=120) as client:
            session = client.open_session(tenant="sharded")
            turns = [
                session.turn(
                    token_ids=list(range(100 + 40 * i, 140 + 40 * i)) * 4, max_tokens=20, ignore_eos=True
                ).result()
                for i in range(3)
            ]
            session.close()
        after = [int(stack.exec("kvstore", ["python", "-c", STORE_STATS], replica=r)) for r in (1, 2)]
        assert all(a > b for a, b in zip(after, before)), (before, after)  # both shards took blocks
        assert turns[2].cached_tokens == cached_history(turns[1].prompt_tokens + 20)  # full blocks and the tail
    finally:
        stack.scale("kvstore", 1)
