"""A tenant flooding the scheduler and clients that hold connections open slowly cannot take the
system from others, against real services on loopback (`LocalCluster` with two tenants' keys,
eight turns running at once, and 2-second read timeouts on the HTTP fronts). The engines emulate
the target (DeepSeek-V3.2 on H800, time dilation 4: `ComputeSettings("emulated")`), so a turn
takes the target GPU's time, where a batch of eight decodes as fast as one, and the latencies
measure the scheduler's queueing rather than two shared CPU cores running the model for both
tenants at once.

- Fair sharing: tenant `flood` sends turns at 10x its fair share (half the measured capacity), open
  loop, tenant `steady` sends one turn at a time at a steady pace:
  `steady`'s median latency stays within 1.5x of its median alone (measured in the same test), and
  `flood` is refused with 429 while `steady` never is.
- Slow clients: 500 connections that send a request header a line at a time and never finish it
  are answered 408 and closed within the header timeout (plus a margin for a loaded machine) while
  a normal client is served throughout; a body that stalls is closed after the body timeout; one
  connection over an address's cap is refused at once. The same guard fronts the tool proxy."""

from __future__ import annotations

import asyncio
import http.client
import json
import statistics
import threading
import time
from concurrent.futures import ThreadPoolExecutor

import pytest

from agentserve.cluster.settings import ComputeSettings
from agentserve.common.http_guard import HEADER_TIMEOUT, TOO_MANY
from agentserve.engine.emulation_config import EmulationConfig
from tests.support.cluster import local_cluster

pytestmark = pytest.mark.integration

KEYS = {"flood": "as-flood-key-0123456789abcdef", "steady": "as-steady-key-0123456789abcde"}
MAX_RUNNING = 8
COMPUTE = ComputeSettings("emulated", EmulationConfig("deepseek-v3.2", "h800", time_dilation=4.0))
TIMEOUT_S = 2.0
CAP = 100
ENV = {
    "AGENTSERVE_API_KEYS": ",".join(f"{tenant}:{key}" for tenant, key in KEYS.items()),
    "AGENTSERVE_MAX_RUNNING_TURNS": str(MAX_RUNNING),
    "AGENTSERVE_MAX_INFLIGHT_TURNS": str(3 * MAX_RUNNING),
    # The scheduler's gateway (--http-*) and the tool proxy (unprefixed).
    "AGENTSERVE_HTTP_HEADER_TIMEOUT_S": str(TIMEOUT_S),
    "AGENTSERVE_HTTP_BODY_TIMEOUT_S": str(TIMEOUT_S),
    "AGENTSERVE_HTTP_MAX_CONNECTIONS_PER_CLIENT": str(CAP),
    "AGENTSERVE_HEADER_TIMEOUT_S": str(TIMEOUT_S),
    "AGENTSERVE_BODY_TIMEOUT_S": str(TIMEOUT_S),
}
TURN = {"prompt": [5, 9, 13, 17] * 4, "max_tokens": 32, "ignore_eos": True, "temperature": 0}
# Closing 500 connections on a loaded 2-core machine: the timers fire on time, the event loop may not.
MARGIN_S = 4.0
# uvloop's timers count from the loop's clock as its iteration began, which a busy iteration leaves
# behind the wall clock: a deadline may pass that much early.
EARLY_S = 0.25


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    with local_cluster(tmp_path_factory, "neighbours", decoders=1, env=ENV, compute=COMPUTE) as running:
        yield running


def _turn(cluster, tenant: str) -> tuple[int, float]:
    conn = http.client.HTTPConnection("127.0.0.1", cluster.ports.http, timeout=120)
    body = json.dumps({**TURN, "model": "agentserve-tiny"}).encode()
    started = time.perf_counter()
    try:
        conn.request(
            "POST",
            "/v1/completions",
            body=body,
            headers={"Content-Type": "application/json", "Authorization": f"Bearer {KEYS[tenant]}"},
        )
        reply = conn.getresponse()
        reply.read()
        return reply.status, time.perf_counter() - started
    finally:
        conn.close()


def _steady(cluster, turns: int, pace_s: float) -> list[tuple[int, float]]:
    """`turns` turns of `steady`, one every `pace_s` (or right after the last, if it took longer)."""
    results = []
    for _ in range(turns):
        started = time.monotonic()
        results.append(_turn(cluster, "steady"))
        time.sleep(max(0.0, pace_s - (time.monotonic() - started)))
    return results


def _capacity(cluster, seconds: float = 3.0) -> float:
    """Turns a second the cluster completes with MAX_RUNNING of `flood`'s turns always waiting."""
    deadline, done = time.monotonic() + seconds, []

    def worker() -> None:
        while time.monotonic() < deadline:
            done.append(_turn(cluster, "flood")[0])

    threads = [threading.Thread(target=worker) for _ in range(MAX_RUNNING)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert set(done) == {200}
    return len(done) / seconds


class Flood:
    """`flood`'s turns at `rate` a second, open loop (a refused turn is not retried; the next
    comes on schedule), while the `with` block runs; `statuses` collects their answers."""

    def __init__(self, cluster, rate: float) -> None:
        self.cluster, self.rate = cluster, rate
        self.statuses: list[int] = []
        self._stop = threading.Event()

    def _send(self, pool: ThreadPoolExecutor) -> None:
        due = time.monotonic()
        while not self._stop.is_set():
            pool.submit(lambda: self.statuses.append(_turn(self.cluster, "flood")[0]))
            due += 1 / self.rate
            time.sleep(max(0.0, due - time.monotonic()))

    def __enter__(self) -> Flood:
        self._pool = ThreadPoolExecutor(32)
        self._sender = threading.Thread(target=self._send, args=(self._pool,))
        self._sender.start()
        time.sleep(1.0)  # the flood fills the scheduler first
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._sender.join()
        self._pool.shutdown()


def test_a_flooding_tenant_is_refused_and_the_steady_one_keeps_its_latency(cluster):
    for _ in range(3):  # warm: both tenants' first turns
        assert _turn(cluster, "steady")[0] == 200 and _turn(cluster, "flood")[0] == 200
    # Of two tenants each has half the capacity as its fair share: the flood offers 10x that.
    capacity = _capacity(cluster)
    rate = 10 * capacity / 2
    alone, loaded, flood_statuses = [], [], []
    # Rounds alternate alone and beside the flood, so that the load of whatever else runs on the
    # machine falls on both sides alike.
    for _ in range(3):
        alone += _steady(cluster, 6, 0.5)
        with Flood(cluster, rate) as flood:
            loaded += _steady(cluster, 6, 0.5)
        flood_statuses += flood.statuses
    p50_alone = statistics.median(seconds for _, seconds in alone)
    p50_loaded = statistics.median(seconds for _, seconds in loaded)
    print(
        f"capacity {capacity:.1f} turns/s; steady p50 alone {p50_alone:.3f} s, beside the flood "
        f"{p50_loaded:.3f} s ({p50_loaded / p50_alone:.2f}x); flood at {rate:.1f}/s: "
        f"{flood_statuses.count(200)} served, {flood_statuses.count(429)} refused; steady: "
        f"{sum(status != 200 for status, _ in alone + loaded)} of {len(alone + loaded)} refused"
    )
    assert {status for status, _ in alone + loaded} == {200}
    assert set(flood_statuses) == {200, 429} and flood_statuses.count(429) > flood_statuses.count(200)
    assert p50_loaded <= 1.5 * p50_alone


async def _slow_header(port: int, source: str) -> tuple[float, bytes]:
    """Send a request header one line every 0.5 s, never ending it; (seconds until the server
    closed the connection, what it answered)."""
    started = time.monotonic()  # before the server accepts: its deadline starts later
    reader, writer = await asyncio.open_connection("127.0.0.1", port, local_addr=(source, 0))
    writer.write(b"POST /v1/completions HTTP/1.1\r\nHost: agentserve\r\n")
    reply = b""
    try:
        while True:
            try:
                chunk = await asyncio.wait_for(reader.read(1024), 0.5)
            except TimeoutError:
                writer.write(b"X-Slow: yes\r\n")
                continue
            if not chunk:
                return time.monotonic() - started, reply
            reply += chunk
    except ConnectionResetError:
        return time.monotonic() - started, reply
    finally:
        writer.close()


def _served_throughout(cluster, stop: threading.Event, statuses: list[int]) -> None:
    while not stop.is_set():
        statuses.append(_turn(cluster, "steady")[0])
        time.sleep(0.2)


async def _slow_clients(port: int, count: int) -> list[tuple[float, bytes]]:
    # Spread over 10 loopback addresses: each stays under its cap of open connections.
    sources = [f"127.0.0.{2 + i % 10}" for i in range(count)]
    return await asyncio.gather(*(_slow_header(port, source) for source in sources))


def test_500_slow_headers_are_closed_within_the_timeout_while_a_normal_client_is_served(cluster):
    stop, statuses = threading.Event(), []
    normal = threading.Thread(target=_served_throughout, args=(cluster, stop, statuses))
    normal.start()
    try:
        closed = asyncio.run(_slow_clients(cluster.ports.http, 500))
    finally:
        stop.set()
        normal.join()
    seconds = sorted(s for s, _ in closed)
    print(
        f"500 slow headers closed after {seconds[0]:.2f} .. {seconds[-1]:.2f} s; normal client: {len(statuses)} turns"
    )
    assert all(reply == HEADER_TIMEOUT for _, reply in closed)
    assert seconds[0] >= TIMEOUT_S - EARLY_S and seconds[-1] <= TIMEOUT_S + MARGIN_S
    assert statuses and set(statuses) == {200}


def test_the_tool_proxy_closes_slow_headers_too(cluster):
    closed = asyncio.run(_slow_clients(cluster.ports.toolproxy_http, 50))
    seconds = sorted(s for s, _ in closed)
    print(f"50 slow headers at the tool proxy closed after {seconds[0]:.2f} .. {seconds[-1]:.2f} s")
    assert all(reply == HEADER_TIMEOUT for _, reply in closed)
    assert seconds[0] >= TIMEOUT_S - EARLY_S and seconds[-1] <= TIMEOUT_S + MARGIN_S


async def _stalled_body(port: int) -> tuple[float, bytes]:
    started = time.monotonic()
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(
        b"POST /v1/completions HTTP/1.1\r\nHost: agentserve\r\nContent-Type: application/json\r\n"
        b"Authorization: Bearer " + KEYS["steady"].encode() + b'\r\nContent-Length: 100\r\n\r\n{"prompt": '
    )
    try:
        reply = await asyncio.wait_for(reader.read(), TIMEOUT_S + MARGIN_S + 5)
    finally:
        writer.close()
    return time.monotonic() - started, reply


def test_a_stalled_body_is_closed_after_the_body_timeout(cluster):
    seconds, reply = asyncio.run(_stalled_body(cluster.ports.http))
    assert reply == HEADER_TIMEOUT and TIMEOUT_S - EARLY_S <= seconds <= TIMEOUT_S + MARGIN_S


async def _over_the_cap(port: int) -> bytes:
    held = [await asyncio.open_connection("127.0.0.1", port, local_addr=("127.0.0.20", 0)) for _ in range(CAP)]
    try:
        reader, writer = await asyncio.open_connection("127.0.0.1", port, local_addr=("127.0.0.20", 0))
        reply = await asyncio.wait_for(reader.read(), 5.0)
        writer.close()
        return reply
    finally:
        for _, writer in held:
            writer.close()


def test_one_connection_over_an_addresss_cap_is_refused_at_once(cluster):
    assert asyncio.run(_over_the_cap(cluster.ports.http)) == TOO_MANY
    assert _turn(cluster, "steady")[0] == 200  # another address (127.0.0.1) is unaffected
