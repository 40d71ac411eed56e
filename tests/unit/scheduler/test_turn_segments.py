"""Turns with segments through SchedulerCore against fake engines: the engine gets the segmented
prompt, a round's turns are grouped onto one prefill engine, bad segments fail before any engine."""

from __future__ import annotations

import asyncio

import pytest

from agentserve.contracts import SamplingParams
from agentserve.contracts.segments import EXACT, PrivateSegment, ReusePolicy, SharedBlock
from agentserve.contracts.turn_segments import SharedRef, TurnSegments
from agentserve.scheduler.registry import Role
from tests.unit.scheduler.fakes import collect, run, status

pytestmark = pytest.mark.unit

GREEDY = SamplingParams(max_tokens=4)


def test_a_text_block_in_a_chat_message_reaches_the_prefill_as_a_shared_segment(make_core, engines, tokenizer):
    core = make_core()
    gathered = "agent1: the bridge is out\n"
    message = f"Round 3. What the others said:\n{gathered}Your move?"
    segments = TurnSegments(3, (SharedRef("r3/agent1", text=gathered),), ReusePolicy(recompute_fraction=0.25))

    async def go():
        sid = await core.open_session(tenant="acme")
        await collect(core.turn(sid, message=message, sampling=GREEDY, segments=segments))

    run(go())
    ((_, request, _),) = engines.prefills
    prompt = request.segments
    block = tuple(tokenizer.encode(gathered))
    (span,) = prompt.shared_spans()
    assert span.block == SharedBlock("r3/agent1", 3, block)
    assert prompt.token_ids == request.token_ids and tuple(request.token_ids[span.start : span.end]) == block
    assert prompt.reuse == ReusePolicy(recompute_fraction=0.25)
    assert isinstance(prompt.segments[0], PrivateSegment) and isinstance(prompt.segments[-1], PrivateSegment)


def test_a_later_turn_marks_blocks_after_the_private_history(make_core, engines) -> None:
    core = make_core()

    async def go():
        sid = await core.open_session(tenant="acme")
        await collect(core.turn(sid, token_ids=[11, 12, 13], sampling=GREEDY))
        refs = (SharedRef("b", (22, 23)), SharedRef("a", (20, 21)))
        await collect(core.turn(sid, token_ids=[20, 21, 22, 23, 5], sampling=GREEDY, segments=TurnSegments(1, refs)))

    run(go())
    request = engines.prefills[1][1]
    history = request.token_ids[:-5]
    assert request.segments.segments == (
        PrivateSegment(tuple(history)),
        SharedBlock("a", 1, (20, 21)),
        SharedBlock("b", 1, (22, 23)),
        PrivateSegment((5,)),
    )


def test_a_rounds_turns_go_to_one_prefill_engine_as_one_group(make_core, engines, spans) -> None:
    core = make_core(prefill=2, round_window_ms=50)
    core.register(status("p0", Role.PREFILL, 6000, running=5))  # least-loaded picks p1 first

    async def agent(i: int, round_index: int = 0, reuse: ReusePolicy = ReusePolicy()):
        sid = await core.open_session(tenant="acme", agent=f"a{i}")
        segments = TurnSegments(round_index, (SharedRef("gathered", (40, 41, 42)),), reuse)
        await collect(core.turn(sid, token_ids=[i + 1, 40, 41, 42], sampling=GREEDY, segments=segments))

    async def go():
        await asyncio.gather(*(agent(i) for i in range(4)))
        # Now p1 is the busy one: the round's late turn still goes where its masters are, a new
        # round and an exact turn (it reuses nothing) are placed by the policy.
        core.register(status("p0", Role.PREFILL, 6000))
        core.register(status("p1", Role.PREFILL, 6001, running=5))
        await agent(4)
        await agent(5, round_index=1)
        await agent(6, reuse=EXACT)

    run(go())
    addresses = [address[-4:] for address, _, _ in engines.prefills]
    assert addresses == ["6001"] * 5 + ["6000", "6000"]
    sizes = [s.attributes.get("turn.round_group_size") for s in spans.get_finished_spans() if s.name == "turn"]
    assert sorted(sizes, key=str) == [1, 1, 4, 4, 4, 4, None]


def test_a_turn_whose_block_is_missing_fails_before_any_engine_call(make_core, engines) -> None:
    core = make_core()

    async def go():
        sid = await core.open_session(tenant="acme")
        segments = TurnSegments(0, (SharedRef("gone", (99, 98)),))
        await collect(core.turn(sid, token_ids=[1, 2, 3], sampling=GREEDY, segments=segments))

    with pytest.raises(ValueError, match="shared block 'gone': its tokens do not occur in the turn's new tokens"):
        run(go())
    assert engines.prefills == []
