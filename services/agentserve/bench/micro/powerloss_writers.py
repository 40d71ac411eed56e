"""The writers whose file-system calls the power-loss recorder logs, run as a child process.

`python -m agentserve.bench.micro.powerloss_writers kvstore|sessions ROOT SEED [--group-commit]`
runs under the recorder (LD_PRELOAD, see `powerloss_shim.py`) and uses the real store code,
unchanged, on a data dir under ROOT. Around each durable write it logs markers through the
recorder (`pl_mark`), so they are ordered with the file-system calls:

- `begin <key> <digest>` before the write: what a reader may find if the write lands;
- `ack <key>` after the write returned: from here on a crash must not lose it.

kvstore: `WRITERS` threads each put `BLOCKS_PER_WRITER` blocks (the key is the block id, the
digest the block's BLAKE2b), in batches of one or two through `KVStore.put_many`.
sessions: `SESSIONS` sessions of the scheduler's `SessionStore` with its `SessionJournal` (the
SQLite session database), `TURNS` committed turns each, interleaved (the key is `<session>/<turn>`,
the digest covers every field the journal saves).
"""

from __future__ import annotations

import argparse
import ctypes
import dataclasses
import hashlib
import json
import random
import threading
from collections.abc import Callable
from pathlib import Path

from agentserve.contracts import AgentInfo
from agentserve.kv.block_hash import BLOCK_ID_BYTES
from agentserve.scheduler.session_journal import SessionJournal
from agentserve.scheduler.sessions import Session, SessionStore

FINGERPRINT = "agentserve.bench.powerloss"
WRITERS = 4
BLOCKS_PER_WRITER = 24
BLOCK_BYTES = 4096
BLOCK_LAYERS = 4
SESSIONS = 4
TURNS = 12
KVSTORE_DIR = "kvstore"
SESSION_DB = "sessions/sessions.db"


def block_id(seed: int, writer: int, index: int) -> bytes:
    return hashlib.blake2b(f"powerloss:{seed}:{writer}:{index}".encode(), digest_size=BLOCK_ID_BYTES).digest()


def turn_tokens(seed: int, session_id: str, turn: int) -> list[int]:
    """The tokens a session's `turn` adds to its history (prompt and output): the same every run."""
    rng = random.Random(f"{seed}:{session_id}:{turn}")
    return [rng.randrange(50_000) for _ in range(rng.randint(40, 400))]


def history_after(seed: int, session_id: str, turns: int) -> list[int]:
    """A session's committed history after `turns` turns."""
    return [t for turn in range(1, turns + 1) for t in turn_tokens(seed, session_id, turn)]


def session_digest(session: Session) -> str:
    """BLAKE2b of every field the session journal saves but `created_at` (a clock reading the
    writer cannot know before `SessionStore.create` saves the session)."""
    fields = {
        name: getattr(session, name)
        for name in (
            "owner",
            "session_id",
            "tenant",
            "agent",
            "parent_id",
            "pending_system",
            "pending_tools",
            "history",
            "turns",
            "client_state",
        )
    }
    fields["pending_tools"] = list(fields["pending_tools"])
    info = session.info
    fields["info"] = [info.agent, list(info.parents), info.critical, info.priority]
    return hashlib.blake2b(json.dumps(fields, sort_keys=True).encode(), digest_size=16).hexdigest()


def _marker() -> Callable[[str], None]:
    pl_mark = ctypes.CDLL(None).pl_mark  # the recorder's: this process runs under it
    pl_mark.argtypes = [ctypes.c_char_p]
    return lambda text: pl_mark(text.encode())


def write_kvstore(root: Path, seed: int, group_commit: bool) -> None:
    # The store imports torch (seconds): the sessions writer, which runs without it, does not pay.
    from agentserve.bench.micro.kvstore.blocks import BlockMaker
    from agentserve.kvstore.store import KVStore

    mark = _marker()
    maker = BlockMaker(FINGERPRINT, BLOCK_BYTES, num_layers=BLOCK_LAYERS, seed=seed)
    store = KVStore.open(root / KVSTORE_DIR, dram_budget_bytes=0, ssd_budget_bytes=1 << 40, group_commit=group_commit)

    def writer(w: int) -> None:
        rng = random.Random(f"{seed}:{w}")
        index = 0
        while index < BLOCKS_PER_WRITER:
            batch = []
            for _ in range(min(rng.randint(1, 2), BLOCKS_PER_WRITER - index)):
                bid = block_id(seed, w, index)
                batch.append((bid, maker.make(bid)))
                index += 1
            for bid, data in batch:
                mark(f"begin {bid.hex()} {hashlib.blake2b(data, digest_size=16).hexdigest()}")
            store.put_many(FINGERPRINT, batch)
            for bid, _ in batch:
                mark(f"ack {bid.hex()}")

    threads = [threading.Thread(target=writer, args=(w,)) for w in range(WRITERS)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    store.close()


def write_sessions(root: Path, seed: int) -> None:
    mark = _marker()
    journal = SessionJournal(root / SESSION_DB)
    store = SessionStore(journal=journal)
    sessions = []
    for i in range(SESSIONS):
        session_id, agent, system = f"s{seed}-{i}", f"agent-{i}", f"system {i}"
        expected = Session(session_id, tenant="t", agent=agent, info=AgentInfo(agent), pending_system=system, owner="t")
        mark(f"begin {session_id}/0 {session_digest(expected)}")
        sessions.append(store.create(tenant="t", agent=agent, system_prompt=system, session_id=session_id, owner="t"))
        mark(f"ack {session_id}/0")  # `create` returned: the open session is in the journal
    for turn in range(1, TURNS + 1):
        for session in sessions:
            history = session.history + turn_tokens(seed, session.session_id, turn)
            expected = _committed_copy(session, history)
            mark(f"begin {session.session_id}/{turn} {session_digest(expected)}")
            session.commit(history)  # the journal's save runs in here (`on_commit`)
            mark(f"ack {session.session_id}/{turn}")
    journal.close()


def _committed_copy(session: Session, history: list[int]) -> Session:
    """What `session` becomes once it commits `history` (for the digest logged before the save)."""
    return dataclasses.replace(
        session, history=history, turns=session.turns + 1, pending_system="", pending_tools=(), on_commit=None
    )


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m agentserve.bench.micro.powerloss_writers")
    parser.add_argument("target", choices=["kvstore", "sessions"])
    parser.add_argument("root", type=Path)
    parser.add_argument("seed", type=int)
    parser.add_argument("--group-commit", action="store_true")
    args = parser.parse_args(argv)
    if args.target == "kvstore":
        write_kvstore(args.root, args.seed, args.group_commit)
    else:
        write_sessions(args.root, args.seed)


if __name__ == "__main__":
    main()
