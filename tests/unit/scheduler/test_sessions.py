"""SessionStore: ids, forks, unknown and closed sessions, owners, the TTL and the caps."""

from __future__ import annotations

import asyncio

import pytest

from agentserve.common.errors import NotFoundError, Overloaded
from agentserve.scheduler.sessions import SessionLimits, SessionStore

pytestmark = pytest.mark.unit


def test_new_sessions_get_distinct_hex_ids() -> None:
    store = SessionStore()
    a, b = store.create(tenant="t"), store.create(tenant="t")
    assert a.session_id != b.session_id
    assert len(a.session_id) == 32 and int(a.session_id, 16) >= 0
    assert store.get(a.session_id) is a and len(store) == 2


def test_fork_copies_the_parents_history_and_tenant() -> None:
    store = SessionStore()
    parent = store.create(tenant="acme", system_prompt="be brief")
    parent.commit([1, 2, 3])
    child = store.create(agent="sub", parent_id=parent.session_id)
    assert (child.history, child.tenant, child.parent_id, child.turns) == ([1, 2, 3], "acme", parent.session_id, 0)
    assert child.pending_system == ""  # the parent already used its system prompt
    child.commit([1, 2, 3, 4])
    assert parent.history == [1, 2, 3]  # a copy, not shared


def test_fork_before_the_parents_first_turn_keeps_its_system_prompt() -> None:
    store = SessionStore()
    parent = store.create(system_prompt="be brief")
    assert store.create(parent_id=parent.session_id).pending_system == "be brief"
    assert store.create(parent_id=parent.session_id, system_prompt="own").pending_system == "own"


def test_fork_cannot_change_tenant() -> None:
    store = SessionStore()
    parent = store.create(tenant="acme")
    with pytest.raises(ValueError, match="tenant"):
        store.create(tenant="other", parent_id=parent.session_id)


def test_unknown_ids_are_not_found() -> None:
    store = SessionStore()
    with pytest.raises(NotFoundError, match="unknown session 'nope'"):
        store.get("nope")
    with pytest.raises(NotFoundError):
        store.create(parent_id="nope")
    with pytest.raises(NotFoundError):
        store.close("nope")
    assert len(store) == 0


def test_close_forgets_and_marks_closed() -> None:
    store = SessionStore()
    session = store.create()
    session.commit([5, 6])
    assert store.close(session.session_id) is session and session.closed
    assert session.session_id not in store
    with pytest.raises(NotFoundError):
        store.get(session.session_id)


def test_caller_chosen_ids() -> None:
    store = SessionStore()
    assert store.create(session_id="chat-42").session_id == "chat-42"
    with pytest.raises(ValueError, match="already exists"):
        store.create(session_id="chat-42")
    for bad in ("", "has space", "x" * 129, "tab\tid"):
        with pytest.raises(ValueError, match="session id"):
            store.create(session_id=bad)


def test_commit_counts_turns_and_consumes_the_system_prompt() -> None:
    session = SessionStore().create(system_prompt="sys")
    session.commit([1, 2])
    session.commit([1, 2, 3, 4])
    assert (session.turns, session.history, session.pending_system) == (2, [1, 2, 3, 4], "")


def test_another_owners_session_is_exactly_as_unknown_as_none() -> None:
    store = SessionStore()
    mine = store.create(tenant="a", owner="a")
    mine.commit([1, 2, 3])
    errors = []
    for session_id in (mine.session_id, "never-opened"):
        for attempt in (
            lambda sid=session_id: store.get(sid, owner="b"),
            lambda sid=session_id: store.create(tenant="b", parent_id=sid, owner="b"),
            lambda sid=session_id: store.close(sid, owner="b"),
        ):
            with pytest.raises(NotFoundError) as err:
                attempt()
            errors.append(str(err.value).replace(session_id, "<id>"))
    assert set(errors) == {"unknown session '<id>'"} and len(errors) == 6
    assert store.get(mine.session_id, owner="a") is mine and not mine.closed and len(store) == 1


def test_two_owners_may_pick_the_same_id_and_never_meet() -> None:
    store = SessionStore()
    a = store.create(tenant="a", session_id="chat-1", owner="a")
    b = store.create(tenant="b", session_id="chat-1", owner="b")
    a.commit([7, 7, 7])
    assert store.get("chat-1", owner="b") is b and b.history == []
    assert store.close("chat-1", owner="a") is a and store.get("chat-1", owner="b") is b
    # The tool proxy's events name a session without its owner: found only when the id is unambiguous.
    assert store.find("chat-1") is b


def test_idle_sessions_expire_after_the_ttl_but_not_while_a_turn_runs() -> None:
    now = [0.0]
    store = SessionStore(SessionLimits(idle_ttl_s=10.0), clock=lambda: now[0])
    idle, busy, used = store.create(), store.create(), store.create()
    now[0] = 8.0
    store.get(used.session_id)  # a lookup is a use
    now[0] = 15.0
    assert asyncio.run(_expire_holding(store, busy)) == [idle]
    assert idle.closed and not busy.closed and len(store) == 2
    now[0] = 30.0
    with pytest.raises(NotFoundError):
        store.get(used.session_id)  # found expired at lookup
    assert used.closed and len(store) == 1


async def _expire_holding(store: SessionStore, session) -> list:
    async with session.lock:
        return store.expire()


def test_session_caps_per_tenant_and_in_all() -> None:
    now = [0.0]
    store = SessionStore(SessionLimits(max_sessions=3, max_per_tenant=2, idle_ttl_s=100.0), clock=lambda: now[0])
    store.create(tenant="a")
    store.create(tenant="a")
    with pytest.raises(Overloaded, match="tenant 'a' has 2 open sessions, its limit") as err:
        store.create(tenant="a")
    assert err.value.retry_after_s == 60.0
    store.create(tenant="b")
    with pytest.raises(Overloaded, match="holds 3 open sessions, its limit"):
        store.create(tenant="c")
    now[0] = 101.0  # all idle past the TTL: room is made by expiring them
    assert store.create(tenant="a").tenant == "a" and len(store) == 1
