"""The deployment as docker-compose.yml describes it: comes up healthy, answers on its published
loopback ports, exports traces to Phoenix, and grows by one decode engine with `--scale`."""

from __future__ import annotations

import json
import time
import urllib.request

import pytest

from agentserve.tools.healthcheck import check
from tests.support.compose import Stack

pytestmark = pytest.mark.container

DECODE_PORT = 50054
# Run inside a container: exit 0 when the gRPC server at argv[1] reports SERVING.
PROBE = "import sys; from agentserve.tools.healthcheck import check; sys.exit(0 if check(sys.argv[1]) else 1)"
ADVERTISED = "from agentserve.common.netutil import advertise_host; print(advertise_host(''))"


def test_every_service_runs_healthy(stack: Stack):
    by_service: dict[str, list[str]] = {}
    for c in stack.containers():
        assert (c.State, c.Health) == ("running", "healthy"), c.Name
        by_service.setdefault(c.Service, []).append(c.Name)
    assert {s: len(names) for s, names in by_service.items()} == {
        "kvstore": 1, "scheduler": 1, "prefill": 1, "decode": 2, "toolproxy": 1, "tracing": 1}


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
    assert isinstance(stack.phoenix.spans(), list)


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
