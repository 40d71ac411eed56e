"""`agentserve up --local --prefill 2`: both prefill engines register with the scheduler, turns of
concurrent sessions are spread over them, and every greedy reply equals a full recompute."""

from __future__ import annotations

import random
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from agentserve.bench.common.target import MeteredCluster
from agentserve.bench.papers.replay.prom import fetch
from agentserve.contracts import SamplingParams
from agentserve.sdk import Client

pytestmark = pytest.mark.integration

SESSIONS = 4
TURNS = 3
MAX_TOKENS = 12


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    running = MeteredCluster(decoders=1, prefill=2, root=tmp_path_factory.mktemp("two-prefill"))
    running.start()
    try:
        yield running
    finally:
        running.stop()


def _wait_registered(log: Path, timeout_s: float = 30.0) -> bool:
    """Its registrar logs once the scheduler accepted it; registration runs beside the warm-up, so
    an engine can turn SERVING a moment before."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if "registered with scheduler at" in log.read_text():
            return True
        time.sleep(0.2)
    return False


def _session(cluster: MeteredCluster, seed: int) -> list[tuple[list[int], list[int]]]:
    """(prompt, greedy reply) of each turn of one session."""
    rng = random.Random(seed)
    history: list[int] = []
    turns = []
    with Client(f"127.0.0.1:{cluster.ports.scheduler}") as client, client.open_session(tenant=f"t{seed}") as session:
        for _ in range(TURNS):
            new_tokens = [rng.randrange(5, 8000) for _ in range(rng.randrange(40, 90))]
            result = session.turn(token_ids=new_tokens, max_tokens=MAX_TOKENS, ignore_eos=True).result()
            prompt = history + new_tokens
            assert result.prompt_tokens == len(prompt)
            turns.append((prompt, result.token_ids))
            history = prompt + result.token_ids
    return turns


def test_two_prefill_engines_register_and_serve_turns_like_a_full_recompute(cluster, reference):
    prefill = ["prefill-0", "prefill-1"]
    ports = {cluster.ports.prefill_port(i) for i in range(2)}
    assert len(ports) == 2 and cluster.ports.prefill_port(0) == cluster.ports.prefill
    for name in prefill:
        assert _wait_registered(cluster.log_dir / f"{name}.log"), name

    with ThreadPoolExecutor(SESSIONS) as pool:
        sessions = list(pool.map(lambda seed: _session(cluster, seed), range(SESSIONS)))
    params = SamplingParams(max_tokens=MAX_TOKENS, ignore_eos=True)
    for turns in sessions:
        for prompt, reply in turns:
            assert reply == reference.generate(prompt, params).output_token_ids

    # Every prefill hands its turns' KV to the decode engine over its compute NIC.
    handoffs = {}
    for name in prefill:
        sample = fetch(cluster.metrics[name])
        assert sample is not None, name
        handoffs[name] = sample[("agentserve_nic_transfers_total", (("nic", "cnic"),))]
    assert all(count > 0 for count in handoffs.values()), handoffs
