"""The real toolproxy process against an in-test scheduler peer and an in-test upstream tool.

The peer is a grpc.aio server implementing only ToolCallStarted/ToolCallFinished; it and the
upstream run on one asyncio loop in a background thread, so the test body stays synchronous.
"""

from __future__ import annotations

import asyncio
import json
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Iterator

import grpc
import pytest
from aiohttp import web

from agentserve.v1 import scheduler_pb2, scheduler_pb2_grpc, toolproxy_pb2, toolproxy_pb2_grpc
from tests.support.processes import ServiceProcess, free_port, start_service

pytestmark = pytest.mark.integration

# uvloop timers have millisecond resolution and may fire that much early.
EARLY = 0.005


class RecordingScheduler(scheduler_pb2_grpc.SchedulerInternalServicer):
    def __init__(self) -> None:
        self.events: list[tuple[str, scheduler_pb2.ToolCallEvent]] = []

    async def ToolCallStarted(self, request, context):
        self.events.append(("started", request))
        return scheduler_pb2.ToolCallAck()

    async def ToolCallFinished(self, request, context):
        self.events.append(("finished", request))
        return scheduler_pb2.ToolCallAck()


class Peers:
    """The scheduler peer and the upstream tool, served from a background event loop."""

    def __init__(self) -> None:
        self.scheduler = RecordingScheduler()
        self.upstream_calls: list[tuple[str | None, dict]] = []
        self.scheduler_port = free_port()
        self.upstream_port = free_port()
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, daemon=True)

    def start(self) -> None:
        self._thread.start()
        asyncio.run_coroutine_threadsafe(self._start(), self._loop).result(30)

    def stop(self) -> None:
        asyncio.run_coroutine_threadsafe(self._stop(), self._loop).result(30)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(10)

    async def _start(self) -> None:
        self._server = grpc.aio.server()
        scheduler_pb2_grpc.add_SchedulerInternalServicer_to_server(self.scheduler, self._server)
        self._server.add_insecure_port(f"127.0.0.1:{self.scheduler_port}")
        await self._server.start()
        app = web.Application()
        app.router.add_post("/search", self._search)
        self._runner = web.AppRunner(app)
        await self._runner.setup()
        await web.TCPSite(self._runner, "127.0.0.1", self.upstream_port).start()

    async def _stop(self) -> None:
        await self._runner.cleanup()
        await self._server.stop(1)

    async def _search(self, request: web.Request) -> web.Response:
        args = await request.json()
        self.upstream_calls.append((request.headers.get("X-Session-Id"), args))
        await asyncio.sleep(0.2)
        return web.json_response({"results": [args["q"].upper()]}, status=200)


@pytest.fixture(scope="module")
def peers() -> Iterator[Peers]:
    peers = Peers()
    peers.start()
    yield peers
    peers.stop()


@pytest.fixture(scope="module")
def toolproxy(peers: Peers) -> Iterator[tuple[ServiceProcess, str]]:
    grpc_port, http_port = free_port(), free_port()
    service = start_service(
        "toolproxy",
        "agentserve.toolproxy",
        [
            "--grpc-port",
            str(grpc_port),
            "--http-port",
            str(http_port),
            "--scheduler-address",
            f"127.0.0.1:{peers.scheduler_port}",
            "--upstreams",
            f"search=http://127.0.0.1:{peers.upstream_port}/search",
            "--default-prediction-s",
            "2.5",
        ],
        grpc_port,
        timeout_s=60,
    )
    yield service, f"http://127.0.0.1:{http_port}"
    assert service.stop() == 0, service.log.read_text()[-3000:]


def post(url: str, body: bytes, headers: dict[str, str] | None = None) -> tuple[int, dict, dict[str, str]]:
    request = urllib.request.Request(
        url, data=body, method="POST", headers={"Content-Type": "application/json", **(headers or {})}
    )
    try:
        with urllib.request.urlopen(request, timeout=30) as resp:
            return resp.status, json.loads(resp.read()), dict(resp.headers)
    except urllib.error.HTTPError as err:
        return err.code, json.loads(err.read()), dict(err.headers)


def events_for(peers: Peers, call_id: str, timeout_s: float = 10.0) -> list[tuple[str, scheduler_pb2.ToolCallEvent]]:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        events = [(kind, e) for kind, e in list(peers.scheduler.events) if e.call_id == call_id]
        if len(events) == 2:
            return events
        time.sleep(0.05)
    raise AssertionError(f"events for call {call_id}: {peers.scheduler.events}")


def test_sleep_reports_wait_events_with_durations(peers, toolproxy):
    _, url = toolproxy
    status, body, headers = post(f"{url}/tools/sleep", b'{"seconds": 0.4}', {"X-Session-Id": "sess-1"})
    assert (status, body) == (200, {"slept_s": 0.4})
    (k1, started), (k2, finished) = events_for(peers, headers["X-Call-Id"])
    assert (k1, k2) == ("started", "finished")
    assert (started.session_id, started.tool, started.predicted_duration_s) == ("sess-1", "sleep", 2.5)
    assert abs(started.start_unix_s - time.time()) < 30
    assert finished.ok and finished.start_unix_s == started.start_unix_s
    assert 0.4 - EARLY <= finished.actual_duration_s < 1.4
    assert float(headers["X-Tool-Duration-S"]) == pytest.approx(finished.actual_duration_s, abs=1e-5)

    status, _, headers = post(
        f"{url}/tools/sleep", b'{"seconds": 0.1}', {"X-Session-Id": "sess-1", "X-Call-Id": "second"}
    )
    (_, started), (_, finished) = events_for(peers, "second")
    assert status == 200 and headers["X-Call-Id"] == "second"
    assert started.predicted_duration_s >= 0.4 - EARLY  # the running mean learned from the first call
    assert 0.1 - EARLY <= finished.actual_duration_s < 1.1


def test_echo_unknown_tool_and_bad_json(toolproxy):
    _, url = toolproxy
    assert post(f"{url}/tools/echo", b'{"x": [1, "two"]}')[:2] == (200, {"x": [1, "two"]})
    status, body, _ = post(f"{url}/tools/nope", b"{}")
    assert status == 404 and "unknown tool" in body["error"]["message"]
    status, body, _ = post(f"{url}/tools/echo", b"{not json")
    assert status == 400 and "JSON" in body["error"]["message"]
    status, _, _ = post(f"{url}/tools/sleep", b'{"seconds": 10000}')
    assert status == 400
    assert post(f"{url}/tools/echo", b"{}")[0] == 200  # still up


def test_upstream_tool_is_forwarded_and_reported(peers, toolproxy):
    _, url = toolproxy
    status, body, headers = post(f"{url}/tools/search", b'{"q": "kv cache"}', {"X-Session-Id": "sess-2"})
    assert (status, body) == (200, {"results": ["KV CACHE"]})
    assert ("sess-2", {"q": "kv cache"}) in peers.upstream_calls
    (_, started), (_, finished) = events_for(peers, headers["X-Call-Id"])
    assert started.tool == "search" and finished.ok and 0.2 - EARLY <= finished.actual_duration_s < 1.2


def test_list_tools_over_grpc(toolproxy):
    service, url = toolproxy
    post(f"{url}/tools/echo", b"{}")
    with grpc.insecure_channel(service.address) as channel:
        tools = toolproxy_pb2_grpc.ToolProxyStub(channel).ListTools(toolproxy_pb2.ListToolsRequest(), timeout=5).tools
    by_name = {t.name: t for t in tools}
    assert {n: t.kind for n, t in by_name.items()} == {"sleep": "builtin", "echo": "builtin", "search": "upstream"}
    assert by_name["echo"].calls >= 1


def test_scheduler_outage_does_not_fail_tool_calls(peers):
    grpc_port, http_port = free_port(), free_port()
    service = start_service(
        "toolproxy-noscheduler",
        "agentserve.toolproxy",
        [
            "--grpc-port",
            str(grpc_port),
            "--http-port",
            str(http_port),
            "--scheduler-address",
            f"127.0.0.1:{free_port()}",
            "--report-timeout-s",
            "0.5",
        ],
        grpc_port,
        timeout_s=60,
    )
    try:
        for _ in range(3):
            status, body, _ = post(
                f"http://127.0.0.1:{http_port}/tools/sleep", b'{"seconds": 0.05}', {"X-Session-Id": "orphan"}
            )
            assert (status, body) == (200, {"slept_s": 0.05})
    finally:
        assert service.stop() == 0
    assert "not delivered" in service.log.read_text()
