"""The replayer against an in-memory serving system: causality (session order, think and tool
time, the dependency DAG), open and closed loop, what each turn sends, and failures."""

import asyncio

import pytest

from agentserve.bench.common.workloads.generator import GeneratorSpec, generate
from agentserve.bench.common.workloads.model import Session, ToolCall, Turn, Workload
from agentserve.bench.papers.replay.replayer import Replayer, ReplayOptions
from tests.unit.bench.papers.replay.fake_serving import FakeServing

pytestmark = pytest.mark.unit


def _replay(workload: Workload, system: FakeServing | None = None, **options):
    system = system or FakeServing()
    replayer = Replayer(workload.validate(), system, ReplayOptions(**options))

    async def go():
        await replayer.warm_prefixes()
        return await replayer.run()

    return asyncio.run(go()), system


def _by_turn(result):
    return {(r.session_id, r.index): r for r in result.turns}


def test_fanout_turns_start_only_after_their_dependencies_and_tools_finished():
    w = generate(
        GeneratorSpec(
            pattern="fanout",
            teams=2,
            agents=3,
            turns=2,
            system_tokens=64,
            first_tokens=40,
            new_tokens=20,
            output_tokens=5,
            tool_prob=1.0,
            tool_time="const:0.05",
            seed=1,
        )
    )
    result, system = _replay(w)
    turns = _by_turn(result)
    assert len(turns) == w.num_turns and all(r.ok for r in turns.values())
    by_id = w.by_id()
    for session in w.sessions:
        for i, turn in enumerate(session.turns):
            me = turns[(session.id, i)]
            if i:
                before = turns[(session.id, i - 1)]
                assert me.sent_s >= before.done_s
                assert before.done_s - before.last_token_s >= 0.05 * 0.9  # its tool call ran in between
            for ref in turn.after:
                sid, k = ref.split("#")
                assert me.sent_s >= turns[(sid, int(k))].done_s, (session.id, i, ref)
    assert len(by_id) == 8
    assert sum(e.kind == "tool" for e in system.events) == sum(len(t.tools) for s in w.sessions for t in s.turns)


def test_later_turns_send_only_new_tokens_and_hit_the_whole_context():
    w = Workload(
        "w",
        (Session("a", (Turn(4, new_tokens=40), Turn(3, new_tokens=20), Turn(2, new_tokens=7)), prefix="sys"),),
        prefixes={"sys": 50},
    )
    result, system = _replay(w)
    turns = [e for e in system.events if e.kind == "turn"]
    warmup, replayed = turns[0], turns[1:]
    assert len(warmup.prompt) == 50
    assert [len(e.sent) for e in replayed] == [90, 20, 7]  # first: prefix + new; then only new tokens
    assert len({e.session for e in replayed}) == 1
    records = result.turns
    assert [r.prompt_tokens for r in records] == [90, 94 + 20, 94 + 20 + 3 + 7]
    assert [r.cached_tokens for r in records] == [48, 80, 112]
    assert [r.expected_cached_tokens for r in records] == [48, 80, 112]
    assert [r.first for r in records] == [True, False, False]


def test_a_turn_that_reuses_less_than_its_context_starts_a_fresh_server_session():
    w = Workload("w", (Session("a", (Turn(10, new_tokens=40), Turn(3, new_tokens=5, reuse_tokens=33))),))
    result, system = _replay(w)
    replayed = [e for e in system.events if e.kind == "turn"]
    assert replayed[1].session != replayed[0].session
    assert replayed[1].prompt == replayed[0].prompt[:33] + replayed[1].prompt[33:] and len(replayed[1].prompt) == 38
    assert [(r.cached_tokens, r.expected_cached_tokens) for r in result.turns] == [(0, 0), (32, 32)]
    assert system.sessions[0].closed


def test_mooncake_style_turns_hit_exactly_the_trace_reuse_when_serial():
    def req(sid, ids, n, at):
        return Session(sid, (Turn(2, hash_ids=ids, input_tokens=n),), arrival_s=at)

    w = Workload(
        "m",
        (
            req("r0", (0, 1, 2), 80, 0.0),
            req("r1", (0, 1, 3), 90, 0.01),
            req("r2", (0, 4), 40, 0.02),
            req("r3", (0, 1, 3, 5), 120, 0.03),
        ),
        hash_block_tokens=32,
    )
    result, _ = _replay(w, concurrency=1)
    got = [(r.cached_tokens, r.expected_cached_tokens, r.trace_cached_tokens) for r in result.turns]
    assert got == [(0, 0, 0), (64, 64, 64), (32, 32, 32), (80, 80, 80)]


def test_closed_loop_keeps_that_many_jobs_in_flight():
    sessions = tuple(Session(f"s{i}", (Turn(5, new_tokens=10), Turn(5, new_tokens=3))) for i in range(6))
    result, system = _replay(Workload("w", sessions), FakeServing(token_s=0.005), concurrency=2)
    assert len(result.turns) == 12 and result.jobs_started == 6
    assert system.max_in_flight == 2


def test_recorded_arrivals_are_divided_by_the_speedup_and_rate_replaces_them():
    sessions = tuple(Session(f"s{i}", (Turn(2, new_tokens=5),), arrival_s=i * 0.4) for i in range(3))
    result, _ = _replay(Workload("w", sessions), speedup=4)
    sent = [r.sent_s for r in sorted(result.turns, key=lambda r: r.session_id)]
    assert sent[1] - sent[0] == pytest.approx(0.1, abs=0.05) and sent[2] - sent[0] == pytest.approx(0.2, abs=0.05)
    limited, _ = _replay(Workload("w", sessions * 1), rate=1000.0, duration_s=1e-9)
    assert limited.jobs_started == 1 and len(limited.turns) == 1


def test_think_and_tool_times_are_scaled_and_tools_overlap_as_recorded():
    turn = Turn(2, new_tokens=5, tools=(ToolCall("a", 0.4), ToolCall("b", 0.4, start_s=0.2)))
    w = Workload("w", (Session("s", (turn, Turn(2, new_tokens=5, think_s=0.4))),))
    result, _ = _replay(w, speedup=2)
    first, second = result.turns
    assert first.tool_s == pytest.approx(0.3, abs=0.08)  # (0.2 + 0.4) / 2: overlapping, not 0.4
    assert second.sent_s - first.done_s == pytest.approx(0.2, abs=0.08)


def test_a_failed_turn_aborts_its_session_but_dependants_still_run():
    def fail(session, tokens):
        return session.agent == "bad"

    w = Workload(
        "w",
        (
            Session("x", (Turn(2, new_tokens=5), Turn(2, new_tokens=5)), agent="bad"),
            Session("y", (Turn(2, new_tokens=5, after=("x",)),)),
        ),
    )
    result, _ = _replay(w, FakeServing(fail_when=fail))
    turns = _by_turn(result)
    assert turns[("x", 0)].error == "RuntimeError: injected failure"
    assert turns[("x", 1)].error.startswith("aborted: RuntimeError")
    assert turns[("y", 0)].ok
    assert ReplayOptions().load_model == "recorded" and ReplayOptions(concurrency=2).load_model == "closed"
    with pytest.raises(ValueError, match="not both"):
        ReplayOptions(rate=1, concurrency=1)


def test_refused_sessions_and_turns_are_sent_again_after_retry_after_and_counted():
    w = Workload("w", (Session("a", (Turn(4, new_tokens=40), Turn(3, new_tokens=20))),))
    system = FakeServing(busy_opens=1, busy_turns=2, retry_after_s=0.05)
    result, _ = _replay(w, system)
    first, second = result.turns
    assert (first.ok, second.ok) == (True, True)
    # The open was refused once, then its first turn twice; the second turn went through at once.
    assert (first.retries, second.retries) == (3, 0)
    assert first.busy_s >= 3 * 0.05 * 0.9 and second.busy_s == 0.0
    replayed = [e for e in system.events if e.kind == "turn"]
    assert [len(e.sent) for e in replayed] == [40, 20]  # a refused turn kept nothing: no history diverged
    assert len(system.sessions) == 1


def test_a_turn_refused_past_the_retry_bound_fails():
    from agentserve.bench.papers.replay import replayer

    w = Workload("w", (Session("a", (Turn(4, new_tokens=40),)),))
    result, _ = _replay(w, FakeServing(busy_turns=replayer.MAX_BUSY_RETRIES + 1, retry_after_s=0.0))
    (record,) = result.turns
    assert record.retries == replayer.MAX_BUSY_RETRIES
    assert record.error == "ServerBusy: KV committed fills the pools; retry later"
