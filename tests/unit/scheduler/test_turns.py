"""TurnRunner through SchedulerCore against fake engines: streaming, commits, retries, validation."""

from __future__ import annotations

import asyncio

import pytest

from agentserve.common.errors import NotFoundError, RetryableError
from agentserve.contracts import KVPath, LoadPlan, SamplingParams
from agentserve.kv.block_hash import block_ids_for
from agentserve.scheduler.config import SchedulerConfig
from agentserve.scheduler.core import SchedulerCore
from agentserve.scheduler.engine_clients import EngineUnavailable
from agentserve.scheduler.registry import Role
from tests.unit.scheduler.fakes import (
    BLOCK_BYTES,
    BLOCK_SIZE,
    EOS,
    FINGERPRINT,
    DroppingEngines,
    collect,
    run,
    status,
)

pytestmark = pytest.mark.unit

GREEDY = SamplingParams(max_tokens=16)


def rendered(tokenizer, *messages) -> list[int]:
    return tokenizer.encode(tokenizer.apply_chat_template(list(messages), add_generation_prompt=True))


def test_turn_streams_prefill_token_then_decode_tokens(make_core, engines, store, tokenizer, spans) -> None:
    store.hits = 2
    core = make_core()

    async def go():
        sid = await core.open_session(tenant="acme", system_prompt="be terse")
        return sid, await collect(core.turn(sid, message="hello", sampling=GREEDY))

    sid, events = run(go())
    prompt = rendered(tokenizer, {"role": "system", "content": "be terse"}, {"role": "user", "content": "hello"})
    assert [e.token_ids for e in events] == [[300], [301], [302], [EOS]]
    meta = events[0].metadata
    assert (meta.turn_index, meta.prompt_tokens, meta.cached_tokens) == (0, len(prompt), 2 * BLOCK_SIZE)
    assert (meta.prefill_engine, meta.decode_engine) == ("p0", "d0")
    assert len(meta.trace_id) == 32 and len(meta.turn_id) == 32
    assert all(e.metadata is None for e in events[1:])
    assert [e.finished for e in events] == [False, False, False, True]
    assert (events[-1].finish_reason, events[-1].completion_tokens) == ("stop", 4)
    assert "".join(e.text for e in events) == tokenizer.decode([300, 301, 302, EOS])

    # The store was asked about the prompt's blocks, salted with the session's tenant.
    assert store.lookups == [block_ids_for(prompt, BLOCK_SIZE, FINGERPRINT, "acme")]
    ((address, prefill, metadata),) = engines.prefills
    assert address == "127.0.0.1:6000" and list(prefill.token_ids) == prompt
    assert (prefill.store_hit_blocks, prefill.decode_address, prefill.tenant) == (2, "127.0.0.1:7000", "acme")
    assert prefill.session_id == sid and prefill.sampling.max_tokens == 16
    # Engine spans join the turn's trace.
    assert dict(metadata)["traceparent"].split("-")[1] == meta.trace_id
    ((address, generate, _),) = engines.generates
    assert address == "127.0.0.1:7000"
    assert list(generate.token_ids) == prompt + [300] and generate.prompt_tokens == len(prompt)
    assert generate.sampling.max_tokens == 15
    (span,) = [s for s in spans.get_finished_spans() if s.name == "turn"]
    assert format(span.context.trace_id, "032x") == meta.trace_id
    assert (span.attributes["session.id"], span.attributes["turn.index"]) == (sid, 0)
    assert span.attributes["turn.completion_tokens"] == 4 and span.attributes["turn.store_hit_blocks"] == 2


def test_history_is_committed_and_the_next_prompt_extends_it(make_core, engines, tokenizer) -> None:
    core = make_core()

    async def go():
        sid = await core.open_session()
        await collect(core.turn(sid, message="one", sampling=GREEDY))
        first_history = list(core.sessions.get(sid).history)
        engines.reply = [400, EOS]
        await collect(core.turn(sid, message="two", role="tool", sampling=GREEDY))
        return sid, first_history

    sid, first_history = run(go())
    first_prompt = list(engines.prefills[0][1].token_ids)
    assert first_history == first_prompt + [300, 301, 302, EOS]
    second_prompt = list(engines.prefills[1][1].token_ids)
    assert second_prompt[: len(first_history)] == first_history
    # A tool result is a user turn wrapped in <tool_response> (the Hermes / Qwen2.5 template).
    assert second_prompt == first_history + tokenizer.encode(
        "\n<|im_start|>user\n<tool_response>\ntwo\n</tool_response><|im_end|>\n<|im_start|>assistant\n"
    )
    session = core.sessions.get(sid)
    assert session.turns == 2 and session.history == second_prompt + [400, EOS]
    assert run(core.close_session(sid)) == (2, len(second_prompt) + 2)


def test_turns_of_one_session_run_in_order(make_core, engines) -> None:
    core = make_core()

    async def go():
        sid = await core.open_session()
        first, second = await asyncio.gather(
            collect(core.turn(sid, token_ids=[10, 11], sampling=GREEDY)),
            collect(core.turn(sid, token_ids=[12], sampling=GREEDY)),
        )
        return first, second

    run(go())
    prompts = [list(r.token_ids) for _, r, _ in engines.prefills]
    assert prompts == [[10, 11], [10, 11, 300, 301, 302, EOS, 12]]


def test_prefill_engine_down_moves_the_turn_to_another(make_core, engines) -> None:
    core = make_core(prefill=2)
    engines.dead.add("127.0.0.1:6000")

    async def go():
        sid = await core.open_session()
        return await collect(core.turn(sid, token_ids=[10, 11], sampling=GREEDY))

    events = run(go())
    assert events[0].metadata.prefill_engine == "p1" and events[-1].finished
    assert [a for a, _, _ in engines.prefills] == ["127.0.0.1:6000", "127.0.0.1:6001"]
    assert core.registry.get("p0") is None and engines.forgotten == ["127.0.0.1:6000"]


def test_an_error_naming_the_decode_engine_blames_the_decode_engine(make_core, engines) -> None:
    core = make_core()
    engines.prefill_error = EngineUnavailable("127.0.0.1:7000", "UNAVAILABLE: LoadKV failed")

    async def go():
        sid = await core.open_session()
        return await collect(core.turn(sid, token_ids=[10], sampling=GREEDY))

    events = run(go())
    assert core.registry.get("d0") is None and core.registry.get("p0") is not None
    assert events[0].metadata.decode_engine == "d1" and engines.prefills[1][1].decode_address == "127.0.0.1:7001"


def test_blame_comes_from_the_error_address_never_from_its_text(make_core, engines) -> None:
    core = make_core(prefill=2)
    # The prefill engine failed; its message happens to mention the decode engine's address.
    engines.prefill_error = EngineUnavailable("127.0.0.1:6000", "UNAVAILABLE: LoadKV to ipv4:127.0.0.1:7000 failed")

    async def go():
        sid = await core.open_session()
        return await collect(core.turn(sid, token_ids=[10], sampling=GREEDY))

    events = run(go())
    assert core.registry.get("p0") is None and core.registry.get("d0") is not None
    assert events[0].metadata.prefill_engine == "p1" and events[0].metadata.decode_engine == "d0"


def test_decode_down_before_streaming_reruns_the_same_request_elsewhere(make_core, engines) -> None:
    core = make_core()
    engines.dead.add("127.0.0.1:7000")  # prefill's handoff went there; Generate then fails

    async def go():
        sid = await core.open_session()
        return sid, await collect(core.turn(sid, token_ids=[10, 11], sampling=GREEDY))

    sid, events = run(go())
    assert [t for e in events for t in e.token_ids] == [300, 301, 302, EOS] and events[-1].finished
    (first_addr, first_req, _), (second_addr, second_req, _) = engines.generates
    assert (first_addr, second_addr) == ("127.0.0.1:7000", "127.0.0.1:7001")
    assert first_req == second_req
    assert core.registry.get("d0") is None
    assert core.sessions.get(sid).history == [10, 11, 300, 301, 302, EOS]


def test_decode_dying_mid_stream_fails_the_turn_and_keeps_history(make_core, engines, spans) -> None:
    core = make_core()

    async def go():
        sid = await core.open_session()
        await collect(core.turn(sid, token_ids=[10], sampling=GREEDY))
        before = list(core.sessions.get(sid).history)
        engines.die_after["127.0.0.1:7000"] = 1  # streams 301, then dies
        seen = []
        with pytest.raises(RetryableError, match="failed mid-turn; retry the turn"):
            async for event in core.turn(sid, token_ids=[20], sampling=GREEDY):
                seen.extend(event.token_ids)
        session = core.sessions.get(sid)
        assert seen == [300, 301]
        assert session.history == before and session.turns == 1
        # The client's retry starts from the unchanged history, on the surviving engine.
        events = await collect(core.turn(sid, token_ids=[20], sampling=GREEDY))
        return before, events

    before, events = run(go())
    failed = [s for s in spans.get_finished_spans() if s.name == "turn" and not s.status.is_ok]
    assert len(failed) == 1 and "retry the turn" in failed[0].status.description
    assert events[-1].finished and events[0].metadata.decode_engine == "d1"
    assert core.registry.get("d0") is None
    assert list(engines.prefills[-1][1].token_ids) == before + [20]


def test_retries_are_bounded(make_core, engines) -> None:
    core = make_core(prefill=3, turn_retries=1)
    engines.dead.update({"127.0.0.1:6000", "127.0.0.1:6001"})

    async def go():
        sid = await core.open_session()
        with pytest.raises(RetryableError, match="retry the turn"):
            await collect(core.turn(sid, token_ids=[10], sampling=GREEDY))
        return sid

    sid = run(go())
    assert len(engines.prefills) == 2 and core.registry.get("p2") is not None
    assert core.sessions.get(sid).turns == 0


def test_no_engine_is_retryable(make_core, engines) -> None:
    core = make_core(prefill=0, decode=0)

    async def go():
        sid = await core.open_session()
        with pytest.raises(RetryableError, match="no engine"):
            await collect(core.turn(sid, token_ids=[10], sampling=GREEDY))

    run(go())
    core = make_core(prefill=1, decode=0)

    async def go2():
        sid = await core.open_session()
        with pytest.raises(RetryableError, match="no healthy decode engine"):
            await collect(core.turn(sid, token_ids=[10], sampling=GREEDY))

    run(go2())
    assert engines.prefills == []


def test_one_token_and_eos_first_end_at_prefill(make_core, engines) -> None:
    core = make_core()

    async def go():
        sid = await core.open_session()
        one = await collect(core.turn(sid, token_ids=[10], sampling=SamplingParams(max_tokens=1)))
        engines.reply = [EOS]
        eos = await collect(core.turn(sid, token_ids=[11], sampling=GREEDY))
        return sid, one, eos

    sid, one, eos = run(go())
    summary = [(e.token_ids, e.finished, e.finish_reason, e.completion_tokens) for e in one]
    assert summary == [([300], True, "length", 1)]
    assert one[0].metadata is not None
    assert [(e.token_ids, e.finish_reason) for e in eos] == [([EOS], "stop")]
    assert engines.generates == []
    assert core.sessions.get(sid).history == [10, 300, 11, EOS]


def test_caller_stop_tokens_end_the_stream(make_core, engines) -> None:
    core = make_core()
    engines.reply = [300, 301, 302, 303, EOS]

    async def go():
        sid = await core.open_session()
        return sid, await collect(core.turn(sid, token_ids=[10], sampling=SamplingParams(16, stop_token_ids=(302,))))

    sid, events = run(go())
    assert [t for e in events for t in e.token_ids] == [300, 301, 302]
    assert (events[-1].finish_reason, events[-1].completion_tokens) == ("stop", 3)
    assert engines.cancelled == ["127.0.0.1:7000"]  # the decode stream was cancelled, not drained
    assert core.sessions.get(sid).history == [10, 300, 301, 302]


def test_store_failure_only_costs_the_hits(make_core, engines, store) -> None:
    store.fail = True
    core = make_core()

    async def go():
        sid = await core.open_session()
        return await collect(core.turn(sid, token_ids=list(range(10, 30)), sampling=GREEDY))

    events = run(go())
    assert events[-1].finished and engines.prefills[0][1].store_hit_blocks == 0


@pytest.mark.parametrize(
    "kwargs, error",
    [
        (dict(message=""), "message is empty"),
        (dict(message="hi", token_ids=[1]), "not both"),
        (dict(token_ids=[8192]), "outside the vocabulary"),
        (dict(message="hi", role="bogus"), "role must be"),
        (dict(token_ids=list(range(40))), "over the limit of 32"),
    ],
)
def test_bad_requests_fail_at_the_call(make_core, engines, kwargs, error) -> None:
    core = make_core(max_message_tokens=32)

    async def go():
        sid = await core.open_session()
        with pytest.raises(ValueError, match=error):
            core.turn(sid, sampling=GREEDY, **kwargs)

    run(go())
    assert engines.prefills == []


def test_context_overflow_fails_before_any_engine_call(make_core, engines) -> None:
    core = make_core()

    async def go():
        sid = await core.open_session()
        with pytest.raises(ValueError, match="exceeds the model's context of 512"):
            await collect(core.turn(sid, token_ids=list(range(10, 500)), sampling=SamplingParams(max_tokens=23)))
        return sid

    sid = run(go())
    assert engines.prefills == [] and core.sessions.get(sid).history == []


def test_unknown_and_closed_sessions(make_core) -> None:
    core = make_core()

    async def go():
        with pytest.raises(NotFoundError):
            core.turn("nope", message="hi", sampling=GREEDY)
        sid = await core.open_session()
        events = core.turn(sid, message="hi", sampling=GREEDY)
        await core.close_session(sid)
        with pytest.raises(NotFoundError, match="closed"):
            await collect(events)
        with pytest.raises(NotFoundError):
            await core.close_session(sid)

    run(go())


def test_complete_is_stateless(make_core, engines) -> None:
    core = make_core()

    async def go():
        return await collect(core.complete([10, 11, 12], GREEDY, tenant="acme"))

    events = run(go())
    assert events[-1].finished and len(core.sessions) == 0
    assert list(engines.prefills[0][1].token_ids) == [10, 11, 12] and engines.prefills[0][1].tenant == "acme"


def test_caller_chosen_session_id_is_get_or_create(make_core) -> None:
    core = make_core()

    async def go():
        assert await core.open_session(tenant="t", session_id="chat-1") == "chat-1"
        assert await core.open_session(tenant="t", session_id="chat-1") == "chat-1"
        with pytest.raises(ValueError, match="another tenant"):
            await core.open_session(tenant="u", session_id="chat-1")

    run(go())
    assert len(core.sessions) == 1


def test_fork_continues_from_the_parent(make_core, engines) -> None:
    core = make_core()

    async def go():
        parent = await core.open_session(tenant="acme")
        await collect(core.turn(parent, token_ids=[10], sampling=GREEDY))
        child = await core.open_session(agent="sub", parent_session_id=parent)
        await collect(core.turn(child, token_ids=[20], sampling=GREEDY))

    run(go())
    assert list(engines.prefills[1][1].token_ids) == [10, 300, 301, 302, EOS, 20]
    assert engines.prefills[1][1].tenant == "acme"


def test_a_caller_stopping_at_the_final_event_does_not_block_the_session(make_core, spans) -> None:
    core = make_core()

    async def go():
        sid = await core.open_session()
        abandoned = core.turn(sid, token_ids=[10], sampling=GREEDY)
        async for event in abandoned:
            if event.finished:
                break  # neither drained nor closed
        session = core.sessions.get(sid)
        assert session.turns == 1 and not session.lock.locked()
        assert [s.name for s in spans.get_finished_spans()] == ["turn"]
        second = await asyncio.wait_for(collect(core.turn(sid, token_ids=[11], sampling=GREEDY)), 5)
        await abandoned.aclose()
        return second

    assert run(go())[-1].finished


def test_a_caller_leaving_mid_turn_cancels_the_decode_and_commits_nothing(make_core, engines) -> None:
    core = make_core()

    async def go():
        sid = await core.open_session()
        events = core.turn(sid, token_ids=[10], sampling=GREEDY)
        async for event in events:
            if event.token_ids == [301]:
                break
        await events.aclose()
        session = core.sessions.get(sid)
        return session.turns, session.history, session.lock.locked(), core.registry.get("d0").inflight

    assert run(go()) == (0, [], False, 0)
    assert engines.cancelled == ["127.0.0.1:7000"]


def test_a_session_sticks_to_the_decode_engine_holding_its_kv(make_core, engines) -> None:
    core = make_core()

    async def go():
        sid = await core.open_session()
        await collect(core.turn(sid, token_ids=[10, 11], sampling=GREEDY))
        # d0 now looks busier than d1: a fresh session would go to d1, this one stays with its KV.
        core.heartbeat(status("d0", Role.DECODE, 7000, running=5))
        second = await collect(core.turn(sid, token_ids=[12], sampling=GREEDY))
        other = await core.open_session()
        fresh = await collect(core.turn(other, token_ids=[13], sampling=GREEDY))
        core.registry.mark_dead("d0")  # the holder is gone: least loaded again
        third = await collect(core.turn(sid, token_ids=[14], sampling=GREEDY))
        return sid, second, fresh, third

    sid, second, fresh, third = run(go())
    assert second[0].metadata.decode_engine == "d0" and fresh[0].metadata.decode_engine == "d1"
    assert third[0].metadata.decode_engine == "d1"
    assert core.sessions.get(sid).kv_holder == "d1"
    assert [r.decode_address for _, r, _ in engines.prefills] == [
        "127.0.0.1:7000",
        "127.0.0.1:7000",
        "127.0.0.1:7001",
        "127.0.0.1:7001",
    ]


def test_path_policy_plans_the_prefill_and_metadata_reports_the_kv_moved(make_core, engines, store) -> None:
    store.hits = 3
    core = make_core(kv_path_policy="always-b")

    async def go():
        sid = await core.open_session()
        return await collect(core.turn(sid, token_ids=list(range(10, 30)), sampling=GREEDY))

    events = run(go())
    ((_, request, _),) = engines.prefills
    assert (request.plan.path, request.plan.relay_address, request.decode_address) == (
        KVPath.B,
        "127.0.0.1:7000",
        "127.0.0.1:7000",
    )
    meta = events[0].metadata
    assert (meta.kv_path, meta.loaded_blocks, meta.relayed_blocks) == ("B", 3, 3)
    assert (meta.handoff_blocks, meta.handoff_bytes) == (20 // BLOCK_SIZE, 20 // BLOCK_SIZE * BLOCK_BYTES)


def test_split_reads_relayed_by_another_decode_engine_are_planned_reported_and_traced(
    make_core, engines, store, spans
) -> None:
    store.hits = 4
    core = make_core(kv_path_policy="split", relay_policy="other-decode", prefill_policy="dualpath")

    async def go():
        sid = await core.open_session()
        return await collect(core.turn(sid, token_ids=list(range(10, 30)), sampling=GREEDY))

    meta = run(go())[0].metadata
    ((_, request, _),) = engines.prefills
    # Unshaped NICs on both sides: an even split, relayed by d1 while d0 decodes.
    assert request.plan == LoadPlan(KVPath.SPLIT, relay_address="127.0.0.1:7001", relay_blocks=2)
    assert request.decode_address == "127.0.0.1:7000"
    assert (meta.kv_path, meta.relayed_blocks, meta.relay_engine, meta.decode_engine) == ("SPLIT", 2, "d1", "d0")
    (span,) = [s for s in spans.get_finished_spans() if s.name == "turn"]
    placement = {k: v for k, v in span.attributes.items() if k.startswith("turn.placement.")}
    assert placement["turn.placement.relay_engine"] == "d1"
    assert placement["turn.placement.relay_reason"] == "other"
    assert placement["turn.placement.split_fraction"] == 0.5
    assert placement["turn.placement.prefill_reason"] == "short-read-queue"


def test_dualpath_prefill_policy_avoids_the_engine_with_more_unfinished_prefill_tokens(make_core, engines) -> None:
    core = make_core(prefill=2, prefill_policy="dualpath")
    core.heartbeat(status("p0", Role.PREFILL, 6000, unfinished_prefill_tokens=300))

    async def go():
        sid = await core.open_session()
        return await collect(core.turn(sid, token_ids=[10, 11], sampling=GREEDY))

    assert run(go())[0].metadata.prefill_engine == "p1"
    assert [address for address, _, _ in engines.prefills] == ["127.0.0.1:6001"]


def test_dualpath_default_loads_by_a_when_queues_tie(make_core, engines, store) -> None:
    store.hits = 3
    core = make_core()

    async def go():
        sid = await core.open_session()
        return await collect(core.turn(sid, token_ids=list(range(10, 30)), sampling=GREEDY))

    assert run(go())[0].metadata.kv_path == "A"
    ((_, request, _),) = engines.prefills
    assert (request.plan.path, request.plan.relay_address) == (KVPath.A, "")


def test_a_failed_handoff_moves_the_turn_to_another_decode_before_streaming(make_core, engines) -> None:
    core = make_core()
    engines.handoff_fails.add("127.0.0.1:7000")  # d0 died; its registration has not expired yet

    async def go():
        sid = await core.open_session()
        return await collect(core.turn(sid, token_ids=[10, 11], sampling=GREEDY))

    events = run(go())
    assert events[0].metadata.decode_engine == "d1" and events[-1].finished
    assert [r.decode_address for _, r, _ in engines.prefills] == ["127.0.0.1:7000", "127.0.0.1:7001"]
    assert [a for a, _, _ in engines.generates] == ["127.0.0.1:7001"]
    assert core.registry.get("d0") is None and core.registry.get("p0") is not None


def test_a_burst_of_new_sessions_spreads_over_decode_engines(make_core, engines) -> None:
    # Each prefill is still running when the next session's first turn is placed: the decode
    # engines it named count as busy, so the burst does not all pick the same idle one.
    core = make_core(decode=2)
    prefill = engines.prefill

    async def slow_prefill(address, request, metadata):
        await asyncio.sleep(0.01)
        return await prefill(address, request, metadata)

    engines.prefill = slow_prefill

    async def go():
        sids = [await core.open_session() for _ in range(4)]
        return await asyncio.gather(*(collect(core.turn(s, token_ids=[10, 11], sampling=GREEDY)) for s in sids))

    turns = run(go())
    assert sorted(t[0].metadata.decode_engine for t in turns) == ["d0", "d0", "d1", "d1"]


def test_session_kv_store_drops_each_turns_kv_and_keeps_no_holder(tokenizer, store) -> None:
    engines = DroppingEngines()
    core = SchedulerCore(SchedulerConfig(http_port=0, session_kv="store"), tokenizer, store=store, engines=engines)
    core.register(status("p0", Role.PREFILL, 6000))
    core.register(status("d0", Role.DECODE, 7000))

    async def go():
        sid = await core.open_session(tenant="acme")
        events = await collect(core.turn(sid, message="hello", sampling=GREEDY))
        return sid, events

    sid, events = run(go())
    session = core.sessions.get(sid)
    history = session.history
    assert history[-1] == EOS and events[-1].finished
    # The turn's decode engine dropped the whole history (prompt and output) before the turn ended.
    assert engines.drops == [("127.0.0.1:7000", block_ids_for(history, BLOCK_SIZE, FINGERPRINT, "acme"))]
    assert session.kv_holder == ""


def test_session_kv_store_drops_the_turns_kv_on_its_relay_too(tokenizer, store) -> None:
    # Another decode engine relayed the turn's store reads and kept them (a relay imports what it
    # relays): the turn's end drops them there as well, or the session's next turn decoded there
    # would find its history held.
    store.hits = 3
    engines = DroppingEngines()
    config = SchedulerConfig(http_port=0, session_kv="store", kv_path_policy="always-b", relay_policy="other-decode")
    core = SchedulerCore(config, tokenizer, store=store, engines=engines)
    core.register(status("p0", Role.PREFILL, 6000))
    core.register(status("d0", Role.DECODE, 7000))
    core.register(status("d1", Role.DECODE, 7001))

    async def go():
        sid = await core.open_session(tenant="acme")
        events = await collect(core.turn(sid, token_ids=list(range(10, 30)), sampling=GREEDY))
        return core.sessions.get(sid).history, events[0].metadata

    history, meta = run(go())
    assert (meta.kv_path, meta.relay_engine, meta.decode_engine) == ("B", "d1", "d0")
    ids = block_ids_for(history, BLOCK_SIZE, FINGERPRINT, "acme")
    assert engines.drops == [("127.0.0.1:7000", ids), ("127.0.0.1:7001", ids)]


def test_session_kv_store_needs_engine_calls_that_drop(tokenizer, store, engines) -> None:
    with pytest.raises(ValueError, match="session_kv=store needs engine calls that can drop KV"):
        SchedulerCore(SchedulerConfig(http_port=0, session_kv="store"), tokenizer, store=store, engines=engines)
    with pytest.raises(ValueError, match="session_kv must be one of decode, store, got 'hbm'"):
        SchedulerConfig(session_kv="hbm")


def test_session_kv_store_drop_leaves_the_blocks_a_turn_in_flight_needs(tokenizer, store) -> None:
    # Two sessions whose prompts start with the same two blocks decode on one engine. The first
    # turn ends while the second is being prefilled (its prefill asked the decode engine what it
    # holds already): the first turn's drop leaves the shared blocks, the second's takes them.
    engines = DroppingEngines()
    core = SchedulerCore(SchedulerConfig(http_port=0, session_kv="store"), tokenizer, store=store, engines=engines)
    core.register(status("p0", Role.PREFILL, 6000))
    core.register(status("d0", Role.DECODE, 7000))
    shared = [10, 11, 12, 13, 14, 15, 16, 17]  # two blocks of BLOCK_SIZE
    first_prompt, second_prompt = shared + [20, 21, 22, 23], shared + [30, 31, 32, 33]
    second_placed, first_done = asyncio.Event(), asyncio.Event()
    prefill = engines.prefill

    async def prefill_waiting_for_the_first_turn(address, request, metadata):
        if list(request.token_ids) == second_prompt:
            second_placed.set()
            await first_done.wait()
        return await prefill(address, request, metadata)

    engines.prefill = prefill_waiting_for_the_first_turn

    async def go():
        one, two = await core.open_session(tenant="acme"), await core.open_session(tenant="acme")
        second = asyncio.create_task(collect(core.turn(two, token_ids=second_prompt, sampling=GREEDY)))
        await second_placed.wait()
        await collect(core.turn(one, token_ids=first_prompt, sampling=GREEDY))
        first_done.set()
        await second
        return core.sessions.get(one).history, core.sessions.get(two).history

    first_history, second_history = run(go())
    first_ids = block_ids_for(first_history, BLOCK_SIZE, FINGERPRINT, "acme")
    second_ids = block_ids_for(second_history, BLOCK_SIZE, FINGERPRINT, "acme")
    assert first_ids[:2] == second_ids[:2]
    assert engines.drops == [("127.0.0.1:7000", first_ids[2:]), ("127.0.0.1:7000", second_ids)]
    assert core.turns.kv.claims.claimed("127.0.0.1:7000") == 0
