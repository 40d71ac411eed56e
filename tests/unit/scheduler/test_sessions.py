"""SessionStore: ids, forks, unknown and closed sessions."""

from __future__ import annotations

import pytest

from agentserve.common.errors import NotFoundError
from agentserve.scheduler.sessions import SessionStore

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
