"""Every KV movement the engines make is one `kv.transfer` span in the tracing UI, with the bytes
that really moved.

Counted from the engines' side: each engine's /metrics counts the transfers it made and their
bytes by path and link (`agentserve_kv_transfers_total`, `..._bytes_total`), and its emulated NICs
count the bytes they let through (`agentserve_nic_bytes_total`). Two sessions run at once, so the
DualPath scheduler sees one load queued on the prefill's storage NIC when it plans the other.
Phoenix's API must then list exactly as many kv.transfer spans under the sessions' traces, path by
path, with the same byte sums, and each NIC's bytes must equal the spans that crossed it. Headless
Chromium renders one turn's trace page to artifacts/kv-transfer-trace.png.
"""

from __future__ import annotations

import random
import sys
import threading
import time
from collections import Counter

import pytest
from prometheus_client.parser import text_string_to_metric_families

from agentserve.sdk import Client
from tests.support.compose import TEST_TIMEOUT_S, Stack, replica_number
from tests.support.screenshot import ARTIFACTS, screenshot

pytestmark = [pytest.mark.container, pytest.mark.timeout(TEST_TIMEOUT_S)]

ENGINE_PORTS = {"prefill": 50053, "decode": 50054}
ATTRIBUTES = (
    "kv.bytes",
    "kv.blocks",
    "kv.layers",
    "kv.path",
    "net.link",
    "net.src",
    "net.dst",
    "net.configured_gbps",
    "net.achieved_gbps",
    "net.queue_wait_ms",
)
METRICS = (
    "import urllib.request; print(urllib.request.urlopen('http://127.0.0.1:9100/metrics', timeout=10).read().decode())"
)
ADVERTISED = "from agentserve.common.netutil import advertise_host; print(advertise_host(''))"
MAX_TOKENS = 20


class EngineCounters:
    """One engine's transfer and NIC counters at one moment."""

    def __init__(self, text: str) -> None:
        self.transfers: Counter[tuple[str, str]] = Counter()
        self.bytes: Counter[tuple[str, str]] = Counter()
        self.nic_bytes: Counter[str] = Counter()
        for family in text_string_to_metric_families(text):
            for sample in family.samples:
                key = (sample.labels.get("path"), sample.labels.get("link"))
                if sample.name == "agentserve_kv_transfers_total":
                    self.transfers[key] += int(sample.value)
                elif sample.name == "agentserve_kv_transfer_bytes_total":
                    self.bytes[key] += int(sample.value)
                elif sample.name == "agentserve_nic_bytes_total":
                    self.nic_bytes[sample.labels["nic"]] += int(sample.value)


def engine_ids(stack: Stack) -> dict[tuple[str, int], str]:
    """(service, replica) -> engine id, as the engines name themselves in spans."""
    ids = {}
    for service, port in ENGINE_PORTS.items():
        for container in stack.containers(service):
            replica = replica_number(container)
            host = stack.exec(service, ["python", "-c", ADVERTISED], replica=replica).strip()
            ids[(service, replica)] = f"{service}-{host}:{port}"
    return ids


def read_counters(stack: Stack, engines: dict[tuple[str, int], str]) -> dict[str, EngineCounters]:
    return {
        engine_id: EngineCounters(stack.exec(service, ["python", "-c", METRICS], replica=replica))
        for (service, replica), engine_id in engines.items()
    }


def run_session(address: str, tenant: str, seed: int, barrier: threading.Barrier, out: list) -> None:
    rng = random.Random(seed)
    with Client(address, timeout_s=120) as client, client.open_session(tenant=tenant, agent="coder") as session:
        for i, n in enumerate((150, 40, 30)):
            if i == 1:
                barrier.wait(timeout=120)  # turn 2 of both sessions at once: two loads to plan together
            tokens = [rng.randrange(5, 8000) for _ in range(n)]
            out.append(session.turn(token_ids=tokens, max_tokens=MAX_TOKENS, ignore_eos=True).result())


def test_every_kv_transfer_is_one_span_with_the_bytes_moved(stack: Stack):
    engines = engine_ids(stack)
    before = read_counters(stack, engines)
    results: dict[str, list] = {"s1": [], "s2": []}
    barrier = threading.Barrier(2)
    threads = [
        threading.Thread(target=run_session, args=(stack.grpc_address, f"spans-{name}", seed, barrier, results[name]))
        for seed, name in enumerate(results)
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=300)
    turns = results["s1"] + results["s2"]
    assert len(turns) == 6, "a session failed; see the compose logs"
    after = read_counters(stack, engines)

    made_count: Counter[tuple[str, str]] = Counter()
    made_bytes: Counter[tuple[str, str]] = Counter()
    for engine_id in engines.values():
        made_count.update(after[engine_id].transfers - before[engine_id].transfers)
        made_bytes.update(after[engine_id].bytes - before[engine_id].bytes)
    expected = sum(made_count.values())
    # Every turn hands off and persists; the earlier turns' KV reaches the prefill by path A or, when
    # the scheduler's NIC balance picks the decode side, by path B / a relay.
    made_paths = {path for path, _ in made_count}
    assert made_paths >= {"handoff", "persist"} and made_paths & {"A", "B", "relay"}, made_count

    trace_ids = [t.trace_id for t in turns]
    spans = wait_for_transfer_spans(stack, trace_ids, expected)
    span_count = Counter((s["attributes"]["kv.path"], s["attributes"]["net.link"]) for s in spans)
    span_bytes: Counter[tuple[str, str]] = Counter()
    for s in spans:
        span_bytes[(s["attributes"]["kv.path"], s["attributes"]["net.link"])] += s["attributes"]["kv.bytes"]
    print(f"\n[kv.transfer] engines made {dict(made_count)}; bytes {dict(made_bytes)}", file=sys.stderr)
    assert span_count == made_count
    assert span_bytes == made_bytes
    for s in spans:
        assert set(ATTRIBUTES) <= set(s["attributes"]), s["attributes"]
        assert s["attributes"]["net.configured_gbps"] > 0  # compose runs the h800-node profile

    # Each emulated NIC let through exactly the bytes of the spans that crossed it.
    for engine_id in engines.values():
        for nic in ("snic", "cnic"):
            crossed = sum(
                s["attributes"]["kv.bytes"]
                for s in spans
                if s["attributes"]["net.link"] == nic
                and names(engine_id, s["attributes"]["net.src"], s["attributes"]["net.dst"])
            )
            moved = after[engine_id].nic_bytes[nic] - before[engine_id].nic_bytes[nic]
            assert moved == crossed, f"{engine_id} {nic}: NIC let through {moved} bytes, spans say {crossed}"

    # The trace page of the turn with the most kinds of transfer (a relay if DualPath chose B),
    # its relay or handoff span selected, rendered headless.
    by_trace: dict[str, set] = {}
    for s in spans:
        by_trace.setdefault(s["context"]["trace_id"], set()).add(s["attributes"]["kv.path"])
    shown = max(trace_ids, key=lambda t: (len(by_trace.get(t, ())), "relay" in by_trace.get(t, ())))
    preference = {"relay": 0, "B": 1, "handoff": 2}
    selected = min(
        (s for s in spans if s["context"]["trace_id"] == shown),
        key=lambda s: preference.get(s["attributes"]["kv.path"], len(preference)),
    )
    png = screenshot(stack.phoenix.trace_url(shown, selected), ARTIFACTS / "kv-transfer-trace.png")
    print(
        f"[kv.transfer] trace {shown} ({sorted(by_trace[shown])}), {selected['attributes']['kv.path']} span "
        f"selected, rendered to {png}",
        file=sys.stderr,
    )
    assert png.stat().st_size > 20_000  # a rendered page, not a blank one


def names(engine_id: str, *ends: str) -> bool:
    """Whether a span end is this engine: by id (`decode-HOST:PORT`) or, for a handoff's receiver,
    by the address the prefill engine dialed (`HOST:PORT`)."""
    address = engine_id.split("-", 1)[1]
    return any(end in (engine_id, address) for end in ends)


def wait_for_transfer_spans(stack: Stack, trace_ids: list[str], expected: int, timeout_s: float = 90.0) -> list:
    """The kv.transfer spans of `trace_ids` once `expected` have arrived (exporters batch ~5 s);
    then a little longer, so a surplus span would show too."""
    deadline = time.monotonic() + timeout_s
    while True:
        spans = [s for t in trace_ids for s in stack.phoenix.spans(name="kv.transfer", trace_id=t)]
        if len(spans) >= expected:
            time.sleep(6)
            return [s for t in trace_ids for s in stack.phoenix.spans(name="kv.transfer", trace_id=t)]
        assert time.monotonic() < deadline, f"{len(spans)} of {expected} kv.transfer spans reached Phoenix"
        time.sleep(1)
