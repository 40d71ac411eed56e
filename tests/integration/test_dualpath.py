"""DualPath through the whole system (`agentserve up --local`'s LocalCluster, driven by the SDK):

- path-B parity: the same multi-turn session with the scheduler forced to path A and to path B
  gives tokens identical to each other and to a single-process full recompute, and the B run
  really relayed its store hits through the decode engine; both cached each history whole, its
  partial last block too (a stored tail, `scheduler/tail_blocks.py`), and so does the A run with
  tails off, where each turn computes that block again;
- suffix-only handoff: over a 5-turn session the decode engine keeps the session's KV (the
  scheduler routes the session back to it), so turns 2-5 hand off at most 10% of a full handoff;
- the global scheduler's policies (two prefill engines, two decode engines, concurrent sessions):
  the baseline (least-loaded, path A), DualPath's (prefill by read queue and unfinished tokens, path
  by the shorter read queue, relay chosen among decode engines) and split reads relayed by a decode
  engine other than the turn's all give the full recompute's greedy tokens, and so does DualPath's
  regime where a session keeps no KV on its decode engine between turns (`session_kv=store`), and
  relays that send the blocks they hold from HBM (`relay_source=hbm-first`) rather than reading
  every relayed block from the store (the default).
"""

from __future__ import annotations

import random
from concurrent.futures import ThreadPoolExecutor

import pytest

from agentserve.bench.micro import handoff as handoff_bench
from agentserve.cluster.local import LocalCluster
from agentserve.cluster.settings import FabricSettings
from agentserve.contracts import SamplingParams
from agentserve.sdk import Client
from tests.support.cluster import local_cluster as support_cluster
from tests.support.tails import cached_history

pytestmark = pytest.mark.integration

MAX_TOKENS = 22
_rng = random.Random(23)
TURNS = [[_rng.randrange(5, 8000) for _ in range(n)] for n in (90, 37, 52, 18)]


def local_cluster(tmp_path_factory, policy: str):
    return support_cluster(tmp_path_factory, policy, fabric=FabricSettings(kv_path_policy=policy))


@pytest.fixture(scope="module")
def path_b_cluster(tmp_path_factory):
    with local_cluster(tmp_path_factory, "always-b") as cluster:
        yield cluster


def _client(cluster: LocalCluster) -> Client:
    return Client(f"127.0.0.1:{cluster.ports.scheduler}", timeout_s=120)


def run_session(cluster: LocalCluster, tenant: str) -> list:
    """The same token-id turns every time; returns each turn's result."""
    with _client(cluster) as client, client.open_session(tenant=tenant, agent="coder") as session:
        return [session.turn(token_ids=t, max_tokens=MAX_TOKENS, ignore_eos=True).result() for t in TURNS]


def test_path_b_session_matches_path_a_and_full_recompute(tmp_path_factory, path_b_cluster, reference):
    with local_cluster(tmp_path_factory, "always-a") as path_a_cluster:
        by_a = run_session(path_a_cluster, "parity")
    by_b = run_session(path_b_cluster, "parity")

    params = SamplingParams(max_tokens=MAX_TOKENS, ignore_eos=True)
    history: list[int] = []
    for i, (a, b) in enumerate(zip(by_a, by_b)):
        prompt = history + TURNS[i]
        assert a.prompt_tokens == b.prompt_tokens == len(prompt)
        assert a.token_ids == b.token_ids, f"turn {i + 1}: path A and path B differ"
        assert b.token_ids == reference.generate(prompt, params).output_token_ids, f"turn {i + 1}"
        assert a.cached_tokens == b.cached_tokens
        # Every token of the history but one its decode engine did not compute (the last it sampled,
        # unless that completed a block) is cached: its full blocks and its stored tail.
        assert b.cached_tokens == cached_history(len(history))
        history = prompt + b.token_ids
        if i > 0:
            # Turn i's hits include the previous turn's output blocks, which only the decode engine
            # computed: the prefill engine had to load them, by A in one run and by B in the other.
            assert (a.metadata.kv_path, a.metadata.relayed_blocks) == ("A", 0)
            assert b.metadata.kv_path == "B"
            assert b.metadata.relayed_blocks == b.metadata.loaded_blocks > 0
            assert a.metadata.loaded_blocks == b.metadata.loaded_blocks


def test_suffix_only_handoff_over_five_turns(path_b_cluster):
    with _client(path_b_cluster) as client:
        rows = handoff_bench.measure(client, turns=5)
    print()
    handoff_bench.report(rows)
    first, later = rows[0], rows[1:]
    assert first.held_blocks == 0 and first.handoff_bytes == first.full_handoff_bytes > 0
    assert len({r.decode_engine for r in rows}) == 1  # the session stayed with its KV holder
    for r in later:
        assert r.held_blocks > 0
        assert r.handoff_bytes <= 0.10 * r.full_handoff_bytes, (
            f"turn {r.turn}: handed off {r.handoff_bytes} bytes, full handoff {r.full_handoff_bytes}"
        )


SPLIT_MAX_TOKENS = 40  # 2.5 blocks of output: every later turn loads >= 2 blocks, so a split has both legs
SCHEDULER_POLICIES = {
    "baseline": dict(prefill_policy="least-loaded", kv_path_policy="always-a", relay_policy="turn-decode"),
    "dualpath": dict(prefill_policy="dualpath", kv_path_policy="dualpath", relay_policy="dualpath"),
    "split-other-relay": dict(prefill_policy="dualpath", kv_path_policy="split", relay_policy="other-decode"),
    # DualPath's regime: no session KV kept on a decode engine between turns (bench dualpath's).
    "dualpath-session-kv-store": dict(
        prefill_policy="dualpath", kv_path_policy="always-b", relay_policy="dualpath", session_kv="store"
    ),
    # Relays that send what they hold from HBM (the session's history on its KV holder) instead of
    # reading every relayed block from the store.
    "always-b-hbm-first": dict(
        prefill_policy="dualpath", kv_path_policy="always-b", relay_policy="turn-decode", relay_source="hbm-first"
    ),
}


@pytest.mark.parametrize("name", list(SCHEDULER_POLICIES))
def test_every_scheduler_policy_gives_the_full_recomputes_tokens(tmp_path_factory, reference, name):
    policies = SCHEDULER_POLICIES[name]
    # The scheduler reads its config from AGENTSERVE_* like any service; engines ignore these.
    env = {f"AGENTSERVE_{key.upper()}": value for key, value in policies.items()}
    with support_cluster(
        tmp_path_factory,
        f"sched-{name}",
        prefill=2,
        fabric=FabricSettings(kv_path_policy=policies["kv_path_policy"]),
        env=env,
    ) as cluster:

        def session(tenant: str) -> list:
            with _client(cluster) as client, client.open_session(tenant=tenant) as s:
                return [s.turn(token_ids=t, max_tokens=SPLIT_MAX_TOKENS, ignore_eos=True).result() for t in TURNS]

        with ThreadPoolExecutor(2) as pool:
            sessions = list(pool.map(session, ["s0", "s1"]))

    params = SamplingParams(max_tokens=SPLIT_MAX_TOKENS, ignore_eos=True)
    for results in sessions:
        history: list[int] = []
        for i, result in enumerate(results):
            prompt = history + TURNS[i]
            assert result.token_ids == reference.generate(prompt, params).output_token_ids, f"{name} turn {i + 1}"
            history = prompt + result.token_ids
            meta = result.metadata
            assert meta.prefill_engine.startswith("prefill-") and meta.decode_engine.startswith("decode-")
            assert bool(meta.relay_engine) == (meta.relayed_blocks > 0), meta
            if i == 0:
                continue
            assert meta.loaded_blocks >= 2  # the previous turn's output blocks, computed by decode only
            if name == "baseline":
                assert (meta.kv_path, meta.relayed_blocks) == ("A", 0)
            if name == "dualpath-session-kv-store":
                # The decode engine dropped the history after the last turn: it held only what it
                # relayed (read from the store) for this one.
                relayed_here = meta.relayed_blocks if meta.relay_engine == meta.decode_engine else 0
                assert meta.handoff_held_blocks <= relayed_here, meta
                assert meta.relayed_blocks >= 2, meta
            if name == "split-other-relay":
                assert meta.kv_path == "SPLIT"
                assert 0 < meta.relayed_blocks < meta.loaded_blocks, meta
                assert meta.relay_engine.startswith("decode-") and meta.relay_engine != meta.decode_engine
