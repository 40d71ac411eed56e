"""Which messages of a resent conversation reach the session, and when progress advances."""

from __future__ import annotations

import asyncio

import pytest

from agentserve.common.errors import NotFoundError, RetryableError
from agentserve.contracts import SamplingParams
from agentserve.scheduler.http.schemas import Message
from agentserve.scheduler.http.sessions import ChatSessions, TurnInput, plan_turn
from tests.unit.scheduler_http.fakes import REPLY, FakeCore

pytestmark = pytest.mark.unit

SYS, U1, A1, U2 = Message("system", "s"), Message("user", "u1"), Message("assistant", REPLY), Message("user", "u2")
GREEDY = SamplingParams(max_tokens=64)


def test_plan_forwards_only_unseen_client_messages():
    assert plan_turn("s1", [SYS, U1], consumed=1, replies=0) == TurnInput("u1", "user", 2)
    assert plan_turn("s1", [SYS, U1, A1, U2], consumed=2, replies=1) == TurnInput("u2", "user", 3)


def test_plan_accepts_histories_without_assistant_echoes():
    assert plan_turn("s1", [U1, U2], consumed=1, replies=1) == TurnInput("u2", "user", 2)


def test_plan_joins_several_new_messages_under_the_last_role():
    tools = [U1, A1, Message("tool", "r1"), Message("tool", "r2")]
    assert plan_turn("s1", tools, consumed=1, replies=1) == TurnInput("r1\n\nr2", "tool", 3)


@pytest.mark.parametrize(
    "messages, consumed, replies, match",
    [
        ([SYS, U1, A1], 2, 1, "already holds 2"),  # nothing new
        ([U1], 2, 1, "already holds 2"),  # history shorter than the session's
        ([U1, A1, A1, U2], 1, 1, "generated 1 assistant replies"),  # client-written assistant turn
        ([SYS, U1, A1, SYS, U2], 2, 1, "system message"),
        ([SYS, A1], 0, 1, "last new message"),
        ([SYS], 0, 0, "last new message"),
    ],
)
def test_plan_rejects_what_the_session_cannot_take(messages, consumed, replies, match):
    with pytest.raises(ValueError, match=match):
        plan_turn("s1", messages, consumed, replies)


async def _drain(events) -> str:
    return "".join([e.text async for e in events])


def test_sessions_open_once_and_append_deltas():
    async def main():
        core = FakeCore()
        sessions = ChatSessions(core)
        assert await _drain(sessions.turn("c1", [SYS, U1], GREEDY, tenant="t")) == REPLY
        assert await _drain(sessions.turn("c1", [SYS, U1, A1, U2], GREEDY)) == REPLY
        return core, sessions

    core, sessions = asyncio.run(main())
    fake = core.sessions["c1"]
    assert (fake.system_prompt, fake.tenant, fake.turns) == ("s", "t", [("user", "u1"), ("user", "u2")])
    progress = sessions.progress("c1")
    assert (progress.consumed, progress.replies) == (3, 2)


def test_failed_turn_leaves_progress_unchanged():
    async def main():
        core = FakeCore()
        sessions = ChatSessions(core)
        await _drain(sessions.turn("c1", [U1], GREEDY))
        core.fail_after = RetryableError("decode engine died")
        with pytest.raises(RetryableError):
            await _drain(sessions.turn("c1", [U1, A1, U2], GREEDY))
        core.fail_after = None
        await _drain(sessions.turn("c1", [U1, A1, U2], GREEDY))  # the retry sends u2 again, once
        return core

    assert asyncio.run(main()).sessions["c1"].turns == [("user", "u1"), ("user", "u2")]


def test_session_closed_in_the_core_is_forgotten_and_reopened():
    async def main():
        core = FakeCore()
        sessions = ChatSessions(core)
        await _drain(sessions.turn("c1", [U1], GREEDY))
        await core.close_session("c1")
        with pytest.raises(NotFoundError):
            await _drain(sessions.turn("c1", [U1, A1, U2], GREEDY))
        assert sessions.progress("c1") is None
        await _drain(sessions.turn("c1", [U2], GREEDY))
        return core

    assert asyncio.run(main()).sessions["c1"].turns == [("user", "u2")]


def test_concurrent_requests_on_one_session_run_in_order():
    async def main():
        core = FakeCore()
        sessions = ChatSessions(core)
        await _drain(sessions.turn("c1", [U1], GREEDY))
        second = [U1, A1, U2]
        third = [*second, A1, Message("user", "u3")]
        await asyncio.gather(_drain(sessions.turn("c1", second, GREEDY)), _drain(sessions.turn("c1", third, GREEDY)))
        return core

    assert [m for _, m in asyncio.run(main()).sessions["c1"].turns] == ["u1", "u2", "u3"]


def test_abandoned_stream_releases_the_session():
    async def main():
        core = FakeCore()
        sessions = ChatSessions(core)
        events = sessions.turn("c1", [U1], GREEDY)
        await anext(events)
        await events.aclose()
        assert not sessions.progress("c1").lock.locked()
        assert sessions.progress("c1").consumed == 0
        await _drain(sessions.turn("c1", [U1], GREEDY))

    asyncio.run(main())


def test_progress_is_bounded_lru():
    async def main():
        sessions = ChatSessions(FakeCore(), max_sessions=2)
        for sid in ("a", "b", "c"):
            await _drain(sessions.turn(sid, [U1], GREEDY))
        return sessions

    sessions = asyncio.run(main())
    assert len(sessions) == 2 and sessions.progress("a") is None and sessions.progress("c") is not None


def test_forgotten_progress_is_picked_up_from_the_core_session():
    """A gateway that lost its progress (LRU, or a restarted scheduler whose sessions are durable)
    continues from what it saved on the core session: only the new message is sent."""
    core = FakeCore()

    async def main():
        first = ChatSessions(core)
        await _drain(first.turn("c1", [SYS, U1], GREEDY))
        fresh = ChatSessions(core)  # nothing in memory
        await _drain(fresh.turn("c1", [SYS, U1, A1, U2], GREEDY))
        return fresh.progress("c1")

    progress = asyncio.run(main())
    assert core.sessions["c1"].turns == [("user", "u1"), ("user", "u2")]
    assert (progress.consumed, progress.replies) == (3, 2)
    assert core.sessions["c1"].state == {"consumed": 3, "replies": 2, "tools": "[]"}
