"""SessionJournal: a store reopened on the same database has the same sessions, token for token."""

from __future__ import annotations

import sqlite3

import pytest

from agentserve.common.errors import NotFoundError
from agentserve.contracts import AgentInfo
from agentserve.scheduler.session_journal import SessionJournal, decode_record, encode_record
from agentserve.scheduler.sessions import SessionLimits, SessionStore

pytestmark = pytest.mark.unit

TOOLS = ({"type": "function", "function": {"name": "f", "parameters": {"type": "object"}}},)


def test_a_reopened_store_resumes_every_open_session_exactly(tmp_path) -> None:
    db = tmp_path / "state" / "sessions.sqlite3"
    store = SessionStore(journal=SessionJournal(db))
    chat = store.create(tenant="acme", agent="coder", system_prompt="be terse", owner="acme", session_id="chat-1")
    chat.commit([1, 2, 70_000, 4_000_000_000], kv_holder="d0")
    chat.client_state = {"consumed": 2, "replies": 1, "tools": "[]"}
    store.save(chat)
    info = AgentInfo("sub", parents=("coder", "searcher"), critical=True, priority=-7)
    fork = store.create(parent_id="chat-1", owner="acme", info=info)
    fresh = store.create(tenant="beta", system_prompt="hi", tools=TOOLS, owner="beta")
    gone = store.create(owner="acme")
    store.close(gone.session_id, owner="acme")

    reopened = SessionStore(journal=SessionJournal(db))
    assert len(reopened) == 3
    again = reopened.get("chat-1", owner="acme")
    assert (again.history, again.turns, again.tenant, again.agent, again.pending_system) == (
        [1, 2, 70_000, 4_000_000_000],
        1,
        "acme",
        "coder",
        "",
    )
    assert again.client_state == {"consumed": 2, "replies": 1, "tools": "[]"}
    assert again.kv_holder == ""  # a routing hint: no engine is known after a restart
    child = reopened.get(fork.session_id, owner="acme")
    assert (child.history, child.parent_id, child.tenant) == ([1, 2, 70_000, 4_000_000_000], "chat-1", "acme")
    assert (child.info, child.agent) == (info, "sub")  # the DAG place and priority survive a restart
    assert again.info == AgentInfo("coder")
    opened = reopened.get(fresh.session_id, owner="beta")
    assert (opened.pending_system, opened.pending_tools, opened.history) == ("hi", TOOLS, [])
    with pytest.raises(NotFoundError):
        reopened.get(gone.session_id, owner="acme")
    # Commits after the restart are written through too.
    again.commit([1, 2, 70_000, 4_000_000_000, 9])
    assert SessionStore(journal=SessionJournal(db)).get("chat-1", owner="acme").history[-1] == 9


def test_expired_sessions_leave_the_journal(tmp_path) -> None:
    now = [0.0]
    db = tmp_path / "sessions.sqlite3"
    store = SessionStore(SessionLimits(idle_ttl_s=10.0), clock=lambda: now[0], journal=SessionJournal(db))
    store.create(session_id="idle")
    now[0] = 11.0
    assert [s.session_id for s in store.expire()] == ["idle"]
    assert len(SessionStore(journal=SessionJournal(db))) == 0


def test_an_unusable_path_is_a_clear_error(tmp_path) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("")
    with pytest.raises(ValueError, match="session_db"):
        SessionJournal(blocker / "sessions.sqlite3")


def test_a_journal_from_before_agent_info_opens_with_default_info(tmp_path) -> None:
    db = tmp_path / "old.sqlite3"
    old = sqlite3.connect(db, isolation_level=None)
    old.execute(
        "CREATE TABLE sessions (owner TEXT NOT NULL, session_id TEXT NOT NULL, tenant TEXT NOT NULL, "
        "agent TEXT NOT NULL, parent_id TEXT NOT NULL, pending_system TEXT NOT NULL, pending_tools TEXT NOT NULL, "
        "history BLOB NOT NULL, turns INTEGER NOT NULL, client_state TEXT NOT NULL, created_at REAL NOT NULL, "
        "PRIMARY KEY (owner, session_id))"
    )
    old.execute("INSERT INTO sessions VALUES ('', 'old', '', 'a', '', '', '[]', x'01000000', 1, '{}', 0.0)")
    old.close()
    store = SessionStore(journal=SessionJournal(db))
    session = store.get("old")
    assert (session.history, session.agent, session.info) == ([1], "a", AgentInfo("a"))
    session.info = AgentInfo("a", priority=3)
    session.commit([1, 2])
    assert SessionStore(journal=SessionJournal(db)).get("old").info == AgentInfo("a", priority=3)


def test_every_write_is_durable_when_it_returns(tmp_path) -> None:
    # FULL syncs the WAL at each commit; NORMAL would leave turns since the last checkpoint to a
    # power cut (`agentserve bench powerloss --target sessions` finds them lost).
    journal = SessionJournal(tmp_path / "sessions.sqlite3")
    try:
        assert journal._db.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
        assert journal._db.execute("PRAGMA synchronous").fetchone()[0] == 2  # FULL
    finally:
        journal.close()


def test_a_session_record_holds_what_its_journal_row_does() -> None:
    store = SessionStore()
    info = AgentInfo("sub", parents=("coder",), critical=True, priority=3)
    session = store.create(tenant="acme", system_prompt="hi", tools=TOOLS, owner="acme/x", session_id="a/b", info=info)
    session.commit(
        [1, 70_000, 4_000_000_000], kv_holder="d0", client_state={"consumed": 1, "replies": 1, "tools": "[]"}
    )
    again = decode_record(encode_record(session))
    fields = ("session_id", "owner", "tenant", "agent", "parent_id", "history", "turns", "client_state", "info")
    assert [getattr(again, f) for f in fields] == [getattr(session, f) for f in fields]
    assert (again.pending_system, again.pending_tools, again.kv_holder) == ("", (), "")  # rendered; a hint
