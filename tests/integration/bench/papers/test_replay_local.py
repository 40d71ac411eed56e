"""`agentserve bench` against a real local cluster (every service a process on loopback, started
the way `bench replay --target local` starts it): small subsets of the real traces replay with no
failed turn and exactly the cache hits the traces' reuse allows; a multi-agent workload keeps its
dependency order through real tool calls; a capacity search runs end to end."""

from __future__ import annotations

import asyncio

import pytest

from agentserve.bench.common.target import local_target
from agentserve.bench.common.workloads import load_workload
from agentserve.bench.common.workloads.generator import GeneratorSpec, generate
from agentserve.bench.common.workloads.model import Workload, components, scaled
from agentserve.bench.papers.replay import capacity as cap
from agentserve.bench.papers.replay.replayer import ReplayOptions
from agentserve.bench.papers.replay.run import replay_once
from agentserve.bench.papers.replay.slo import SLO
from tests.support.traces import MOONCAKE_CONVERSATION, TRACELAB_ROUNDS

pytestmark = pytest.mark.integration

SLO_LOOSE = SLO.parse("ttft_p90=60000ms,tpot_p90=10000ms")


@pytest.fixture(scope="module")
def loop():
    loop = asyncio.new_event_loop()
    yield loop
    loop.close()


@pytest.fixture(scope="module")
def target(loop):
    target = loop.run_until_complete(local_target(decoders=2))
    try:
        yield target
    finally:
        loop.run_until_complete(target.close())


def _replay(loop, target, workload: Workload, options: ReplayOptions = ReplayOptions()):
    return loop.run_until_complete(replay_once(workload, target, options, SLO_LOOSE))


def test_tracelab_sample_replays_without_failures_and_hits_the_recorded_reuse(loop, target):
    workload = scaled(load_workload(TRACELAB_ROUNDS), 32)
    summary, result = _replay(loop, target, workload, ReplayOptions(speedup=20))
    assert (summary["turns_total"], summary["turns_failed"]) == (19, 0)
    match = summary["cache_match"]
    # Each turn reuses exactly the recorded prefix (the first turns: the warmed system prompts).
    assert match["turns_exact"] == 19 and match["cached_tokens"] == match["trace_cached_tokens"] > 0
    assert all(t.tool_s > 0 for t in result.turns if workload.by_id()[t.session_id].turns[t.index].tools)
    assert summary["tool_wait_share"] > 0.2
    assert summary["ttft_p90_first_turn_ms"] is not None and summary["ttft_p90_later_turns_ms"] is not None
    kv = summary["kv_bytes_by_path"]
    assert kv["persist"] > 0 and kv["handoff"] > 0


def test_mooncake_conversations_hit_exactly_the_trace_hash_id_reuse(loop, target):
    first200 = scaled(load_workload(MOONCAKE_CONVERSATION, limit=200), 32)
    # The conversations among the first 200 requests: every request that extends another, with it.
    chained = [s for job in components(first200) if len(job) > 1 for s in job]
    workload = Workload(
        "conversations", tuple(sorted(chained, key=lambda s: s.arrival_s)), hash_block_tokens=first200.hash_block_tokens
    ).validate()
    assert 6 <= len(workload.sessions) <= 20
    # One conversation at a time, its recorded gaps shrunk: each request waits only for the one it extends.
    summary, result = _replay(loop, target, workload, ReplayOptions(concurrency=1, speedup=1000))
    assert summary["turns_failed"] == 0
    assert [t.cached_tokens for t in result.turns] == [t.trace_cached_tokens for t in result.turns]
    later = [t for t in result.turns if not t.first]
    assert later and all(t.cached_tokens >= 2 * workload.hash_block_tokens for t in later)


def test_fanout_agents_keep_dependency_order_through_real_tool_calls(loop, target):
    workload = scaled(
        generate(
            GeneratorSpec(
                pattern="fanout",
                teams=2,
                agents=2,
                turns=2,
                system_tokens=512,
                first_tokens=256,
                new_tokens=128,
                output_tokens=64,
                tool_prob=1.0,
                tool_time="const:0.2",
                arrival_rate=2.0,
                seed=3,
            )
        ),
        4,
    )
    summary, result = _replay(loop, target, workload)
    assert (summary["turns_total"], summary["turns_failed"]) == (workload.num_turns, 0)
    done = {(t.session_id, t.index): t for t in result.turns}
    for session in workload.sessions:
        for i, turn in enumerate(session.turns):
            for ref in turn.after:
                sid, k = ref.split("#")
                assert done[(session.id, i)].sent_s >= done[(sid, int(k))].done_s
    assert summary["hit_ratio_later_turns"] > 0.5
    assert summary["cache_match"]["turns_below_expected"] == 0
    spans = target.spans.transfers
    assert {"persist", "handoff"} <= {t.path for t in spans}


def test_capacity_search_runs_end_to_end(loop, target):
    workload = generate(
        GeneratorSpec(
            pattern="independent",
            teams=2,
            agents=1,
            turns=2,
            system_tokens=0,
            first_tokens=64,
            new_tokens=32,
            output_tokens=8,
            tool_prob=0,
            seed=1,
        )
    )
    probes = []

    async def probe(load: float) -> bool:
        summary, _ = await replay_once(workload, target, cap.with_load(ReplayOptions(), "concurrency", load), SLO_LOOSE)
        probes.append(cap.probe_entry(load, summary))
        return bool(summary["goodput"]["meets_slo"])

    found = loop.run_until_complete(cap.search(probe, cap.SearchSpec(start=1, max_load=2, integer=True)))
    assert (found.capacity, found.converged, [p["load"] for p in probes]) == (2.0, True, [1.0, 2.0])
    per_engine = cap.per_engine(found.capacity, probes)
    assert per_engine["prefill"]["capacity_per_engine"] == 2.0 and per_engine["decode"]["engines"]
