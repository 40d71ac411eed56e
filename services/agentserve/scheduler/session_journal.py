"""SessionJournal: every open session written through to an embedded SQLite database, so a
restarted scheduler resumes each one with its exact token history.

What a session needs to continue is saved: owner, tenant, agent, parent, what the application
said of the agent (`AgentInfo`: DAG parents, critical path, priority), the system prompt and tools
not yet rendered, the committed history (token ids as little-endian uint32), the turn count and
the HTTP gateway's progress (`client_state`). What is only a routing hint is not: the KV
holder (a restarted scheduler knows no engine yet; the next turn's prefix comes from the store or
is recomputed, the same tokens either way), tool waits, idle time (the TTL counts from the restart).

A row is written when a session opens, after each committed turn and when the gateway's progress
moves; it is deleted when the session closes or expires. The database runs in WAL mode with
`synchronous=FULL`, so each write is durable when it returns, through a power cut too: the WAL is
synced at every commit (NORMAL syncs it only at checkpoints, so a power cut loses the turns
committed since the last one), and SQLite syncs the directory when it creates the WAL. The
database's directory is created durable in its parent (`make_durable_dirs`).
`agentserve bench powerloss --target sessions` checks this under simulated power cuts.
"""

from __future__ import annotations

import base64
import json
import sqlite3
import sys
from array import array
from pathlib import Path

from agentserve.common.durable_dirs import make_durable_dirs
from agentserve.contracts import AgentInfo
from agentserve.scheduler.sessions import Session

SCHEMA = """
CREATE TABLE IF NOT EXISTS sessions (
    owner TEXT NOT NULL,
    session_id TEXT NOT NULL,
    tenant TEXT NOT NULL,
    agent TEXT NOT NULL,
    parent_id TEXT NOT NULL,
    pending_system TEXT NOT NULL,
    pending_tools TEXT NOT NULL,
    history BLOB NOT NULL,
    turns INTEGER NOT NULL,
    client_state TEXT NOT NULL,
    created_at REAL NOT NULL,
    info TEXT NOT NULL DEFAULT '{}',
    PRIMARY KEY (owner, session_id)
)
"""
# A journal written before sessions kept their AgentInfo gains the column (its sessions: the default).
ADD_INFO = "ALTER TABLE sessions ADD COLUMN info TEXT NOT NULL DEFAULT '{}'"
COLUMNS = (
    "owner, session_id, tenant, agent, parent_id, pending_system, pending_tools, history, turns, client_state, "
    "created_at, info"
)


def _info_to_json(info: AgentInfo) -> str:
    return json.dumps(
        {"agent": info.agent, "parents": list(info.parents), "critical": info.critical, "priority": info.priority}
    )


def _info_from_json(text: str, agent: str) -> AgentInfo:
    """A row from before the column has `{}`: the agent of its `agent` column, defaults otherwise."""
    fields = json.loads(text)
    return AgentInfo(
        fields.get("agent", agent),
        tuple(fields.get("parents", ())),
        fields.get("critical", False),
        fields.get("priority", 0),
    )


def _pack(tokens: list[int]) -> bytes:
    packed = array("I", tokens)
    if sys.byteorder != "little":
        packed.byteswap()
    return packed.tobytes()


def _unpack(blob: bytes) -> list[int]:
    packed = array("I")
    packed.frombytes(blob)
    if sys.byteorder != "little":
        packed.byteswap()
    return packed.tolist()


def encode_record(session: Session) -> bytes:
    """The session as one JSON record, with what the journal's row holds (shared state in etcd keeps
    this as the session's value; the history is the row's packed uint32s, base64)."""
    return json.dumps(
        {
            "owner": session.owner,
            "session_id": session.session_id,
            "tenant": session.tenant,
            "agent": session.agent,
            "parent_id": session.parent_id,
            "pending_system": session.pending_system,
            "pending_tools": list(session.pending_tools),
            "history": base64.b64encode(_pack(session.history)).decode(),
            "turns": session.turns,
            "client_state": session.client_state,
            "created_at": session.created_at,
            "info": json.loads(_info_to_json(session.info)),
        },
        separators=(",", ":"),
    ).encode()


def decode_record(data: bytes) -> Session:
    fields = json.loads(data)
    return Session(
        fields["session_id"],
        tenant=fields["tenant"],
        agent=fields["agent"],
        parent_id=fields["parent_id"],
        pending_system=fields["pending_system"],
        pending_tools=tuple(fields["pending_tools"]),
        history=_unpack(base64.b64decode(fields["history"])),
        turns=fields["turns"],
        owner=fields["owner"],
        client_state=fields["client_state"],
        created_at=fields["created_at"],
        info=_info_from_json(json.dumps(fields["info"]), fields["agent"]),
    )


class SessionJournal:
    def __init__(self, path: str | Path) -> None:
        path = Path(path)
        try:
            make_durable_dirs(path.parent)
            self._db = sqlite3.connect(path, isolation_level=None)  # autocommit: one statement, one transaction
            self._db.execute("PRAGMA journal_mode=WAL")
            self._db.execute("PRAGMA synchronous=FULL")
            self._db.execute(SCHEMA)
            if "info" not in {row[1] for row in self._db.execute("PRAGMA table_info(sessions)")}:
                self._db.execute(ADD_INFO)
        except (OSError, sqlite3.Error) as exc:
            raise ValueError(f"session_db {str(path)!r}: {exc}") from None
        self.path = path

    def save(self, session: Session) -> None:
        self._db.execute(
            f"INSERT OR REPLACE INTO sessions ({COLUMNS}) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
            (
                session.owner,
                session.session_id,
                session.tenant,
                session.agent,
                session.parent_id,
                session.pending_system,
                json.dumps(list(session.pending_tools)),
                _pack(session.history),
                session.turns,
                json.dumps(session.client_state),
                session.created_at,
                _info_to_json(session.info),
            ),
        )

    def delete(self, session: Session) -> None:
        self._db.execute("DELETE FROM sessions WHERE owner = ? AND session_id = ?", (session.owner, session.session_id))

    def load(self) -> list[Session]:
        rows = self._db.execute(f"SELECT {COLUMNS} FROM sessions")
        return [
            Session(
                session_id,
                tenant=tenant,
                agent=agent,
                parent_id=parent_id,
                pending_system=pending_system,
                pending_tools=tuple(json.loads(pending_tools)),
                history=_unpack(history),
                turns=turns,
                owner=owner,
                client_state=json.loads(client_state),
                created_at=created_at,
                info=_info_from_json(info, agent),
            )
            for owner, session_id, tenant, agent, parent_id, pending_system, pending_tools, history, turns, client_state, created_at, info in rows  # noqa: E501
        ]

    def close(self) -> None:
        self._db.close()
