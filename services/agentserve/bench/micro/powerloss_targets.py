"""What a power-loss trial checks after restarting the real store on the durable state.

The markers logged before the crash point say what the writer had begun (`begin <key> <digest>`)
and what had been acknowledged (`ack <key>`). After the restart:

- kvstore: `KVStore.open` on the data dir (its start-up scan removes temp files and rebuilds the
  index), then a verified read of every begun block. An acknowledged block that reads as absent
  is lost; any block that reads with other bytes than written is torn and readable (the store's
  own checksums must stop that).
- sessions: the scheduler's `SessionStore` over its `SessionJournal` (as a restarted scheduler
  opens it). A session whose last acknowledged turn is missing is lost; a restored session
  whose fields differ from what the writer saved at its turn count, or a database failing
  SQLite's integrity check, is torn. The next turn's prompt is the restored history plus the
  turn's new tokens (`scheduler/turns.py`), so it is rebuilt from the restored session and
  compared token for token with the prompt the writer, never crashed, would send.
"""

from __future__ import annotations

import hashlib
import sqlite3
from contextlib import closing
from dataclasses import dataclass, field
from pathlib import Path

from agentserve.bench.micro.powerloss_log import Kind, Op
from agentserve.bench.micro.powerloss_writers import (
    FINGERPRINT,
    KVSTORE_DIR,
    SESSION_DB,
    history_after,
    session_digest,
    turn_tokens,
)
from agentserve.kvstore.store import KVStore
from agentserve.scheduler.session_journal import SessionJournal
from agentserve.scheduler.sessions import SessionStore


@dataclass(frozen=True)
class Marks:
    begun: dict[str, str]  # key -> digest of what its write holds
    acked: set[str]


@dataclass
class Outcome:
    acknowledged: int = 0  # acknowledged items checked
    lost: int = 0
    torn_readable: int = 0
    refused: int = 0  # kvstore: files the store's verification found torn and dropped (never served)
    next_turn_checked: int = 0
    next_turn_differs: int = 0
    problems: list[str] = field(default_factory=list)  # what went wrong, one line each


def marks_of(ops: list[Op]) -> Marks:
    begun: dict[str, str] = {}
    acked: set[str] = set()
    for op in ops:
        if op.kind is not Kind.MARK:
            continue
        word, key, *rest = op.path.split(" ")
        if word == "begin":
            begun[key] = rest[0]
        elif word == "ack":
            acked.add(key)
    return Marks(begun, acked)


def check_kvstore(root: Path, marks: Marks, seed: int) -> Outcome:
    del seed  # the digests in the markers are enough
    outcome = Outcome(acknowledged=len(marks.acked))
    store = KVStore.open(root / KVSTORE_DIR, dram_budget_bytes=0, ssd_budget_bytes=1 << 40)
    try:
        for key, digest in sorted(marks.begun.items()):
            data = store.get(bytes.fromhex(key), FINGERPRINT)
            if data is None:
                if key in marks.acked:
                    outcome.lost += 1
                    outcome.problems.append(f"acknowledged block {key[:12]} lost")
            elif hashlib.blake2b(data, digest_size=16).hexdigest() != digest:
                outcome.torn_readable += 1
                outcome.problems.append(f"block {key[:12]} readable with other bytes than written")
        outcome.refused = store.ssd.stats().corrupt_dropped
    finally:
        store.close()
    return outcome


def check_sessions(root: Path, marks: Marks, seed: int) -> Outcome:
    latest: dict[str, int] = {}
    for key in marks.acked:
        session_id, turn_text = key.rsplit("/", 1)
        latest[session_id] = max(latest.get(session_id, -1), int(turn_text))
    outcome = Outcome(acknowledged=len(latest))
    journal = SessionJournal(root / SESSION_DB)
    try:
        restored = {s.session_id: s for s in SessionStore(journal=journal)}
    finally:
        journal.close()
    with closing(sqlite3.connect(root / SESSION_DB)) as db:
        if db.execute("PRAGMA integrity_check").fetchone()[0] != "ok":
            outcome.torn_readable += 1
            outcome.problems.append("session database fails its integrity check")
    for session_id, turn in sorted(latest.items()):
        session = restored.get(session_id)
        if session is None or session.turns < turn:
            outcome.lost += 1
            found = "no session" if session is None else f"turn {session.turns}"
            outcome.problems.append(f"session {session_id}: acknowledged turn {turn} lost ({found} restored)")
    for session_id, session in sorted(restored.items()):
        if session_digest(session) != marks.begun.get(f"{session_id}/{session.turns}"):
            outcome.torn_readable += 1
            outcome.problems.append(f"session {session_id}: turn {session.turns} restored with other fields")
            continue
        outcome.next_turn_checked += 1
        next_prompt = session.history + turn_tokens(seed, session_id, session.turns + 1)
        if next_prompt != history_after(seed, session_id, session.turns + 1):
            outcome.next_turn_differs += 1
            outcome.problems.append(f"session {session_id}: next turn's prompt differs")
    return outcome


CHECKS = {"kvstore": check_kvstore, "sessions": check_sessions}
