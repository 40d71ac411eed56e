"""SessionDirectory: sessions whose records live in etcd, each run by one home scheduler at a time.

A session's record (`sessions/<owner>/<id>`: history, tools, tenant, owner, the front's progress)
has a revision, its key's mod revision in etcd. Its home key (`homes/<owner>/<id>`, the issue's
"owner key") names the scheduler that runs its turns and lives under that scheduler's lease.

Every request for a session is `locate`d first, by whichever scheduler received it:
- the home key names this scheduler (under its current lease): the turn runs here, on the copy
  held here, re-read first if its revision is not the record's;
- it names another: the request is forwarded there (`forwarding.py`);
- there is none (a new session, or its home's lease lapsed): this scheduler claims it with a
  transaction that succeeds only if the key is still absent and the record unchanged, and reads the
  record in the same transaction.

A turn commits with a compare-and-swap (`commit`): the record is replaced only if its revision is
still the one the turn started from and the home key still names this scheduler under its lease.
The session's KV ledger (`kv/<owner>/<id>`, `kv_ledger.py`: which decode engine holds its KV, and
the layout of reused KV in the store) is written in the same transaction and read with the record
whenever a copy is (re)read here, so a scheduler taking a session over finds its KV.
Two schedulers can therefore never both append to one session: the second to commit finds the
revision moved and its turn is refused (`SessionMoved`, retryable: the retry goes to the new home).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

from agentserve.common.errors import Conflict, RetryableError
from agentserve.common.etcd import (
    Etcd,
    EtcdError,
    KeyValue,
    delete_op,
    lease_is,
    mod_revision_is,
    put_op,
    range_op,
    value_is,
    version_is,
)
from agentserve.scheduler.kv_ledger import KVLedger
from agentserve.scheduler.session_journal import decode_record, encode_record
from agentserve.scheduler.sessions import Session, SessionStore
from agentserve.scheduler.shared_state import Keys, Membership, Peer

log = logging.getLogger(__name__)

# A locate that keeps losing races (homes claimed and lapsing under it) gives up after this many rounds.
LOCATE_ROUNDS = 5
# How often `wait_moved` re-reads a home key while its scheduler's lease runs out.
MOVE_POLL_S = 0.1


class SessionMoved(RetryableError):
    """The session's record changed under a turn, or another scheduler is now its home: the turn
    was not committed. Retrying reaches the session's current home."""


@dataclass(frozen=True)
class Located:
    peer: Peer | None  # the home to forward to; None: this scheduler is the home
    revision: int  # the record's revision when located (0: there is no record)
    reloaded: bool = False  # the copy held here was (re)read from etcd: a front's own cache of it is stale
    home_revision: int = 0  # the mod revision of the home key naming `peer` (`wait_moved` waits for a change)


class SessionDirectory:
    def __init__(
        self,
        etcd: Etcd,
        keys: Keys,
        membership: Membership,
        sessions: SessionStore,
        on_hold: Callable[[Session], None] = lambda session: None,
        on_release: Callable[[Session], None] = lambda session: None,
    ) -> None:
        """`sessions` holds the copies of the sessions this scheduler is home to; `on_hold` is told
        of each copy it starts to hold, `on_release` of each it stops holding."""
        self.etcd = etcd
        self.keys = keys
        self.membership = membership
        self.sessions = sessions
        self._on_hold = on_hold
        self._on_release = on_release
        self._deletes: set[asyncio.Task] = set()

    @property
    def _me(self) -> bytes:
        return self.membership.scheduler_id.encode()

    def _mine(self, home: KeyValue) -> bool:
        return home.value == self._me and home.lease == self.membership.lease

    async def locate(
        self, session_id: str, owner: str, *, create: bool = False, expect_revision: int | None = None
    ) -> Located:
        """Where the owner's session runs, claiming it when it has no home. Without a record (closed,
        or never opened) it is claimed only with `create` (a front about to open it under that id);
        otherwise the copy held here is dropped and the caller's local call reports it unknown.
        `expect_revision`: the revision a forwarded request saw; Conflict if the record has moved
        past it (its home may have committed that very request before it died)."""
        if not self.membership.lease:
            raise RetryableError("this scheduler has not joined etcd yet; retry")
        home_key, record_key = self.keys.home(owner, session_id), self.keys.session(owner, session_id)
        for _ in range(LOCATE_ROUNDS):
            read = await self.etcd.txn([], [range_op(home_key), range_op(record_key, keys_only=True)])
            homes, records = read.ranges(0), read.ranges(1)
            revision = records[0].mod_revision if records else 0
            if expect_revision is not None and revision != expect_revision:
                raise Conflict(
                    f"session {session_id!r} changed while its scheduler failed (revision {expect_revision} -> "
                    f"{revision}): the turn may have been committed; read the session before sending it again"
                )
            if not records and not create:
                self._release(session_id, owner)
                return Located(None, 0)
            if homes and self._mine(homes[0]):
                return await self._hold(session_id, owner, revision)
            if homes and homes[0].value != self._me:
                peer = await self.membership.peer(homes[0].value.decode())
                if peer is None:
                    continue  # its scheduler's lease lapsed between the reads: the home key is gone too
                self._release(session_id, owner)  # a copy from when we were its home is stale
                return Located(peer, revision, home_revision=homes[0].mod_revision)
            # No home, or ours under a lease we no longer hold (this scheduler restarted under its
            # id, or its lease lapsed): claim it, if nobody did since the read.
            home_unchanged = lease_is(home_key, homes[0].lease) if homes else version_is(home_key, 0)
            claim = await self.etcd.txn(
                [home_unchanged, mod_revision_is(record_key, revision)],
                [
                    put_op(home_key, self._me, self.membership.lease),
                    range_op(record_key),
                    range_op(self.keys.kv_ledger(owner, session_id)),
                ],
            )
            if claim.succeeded:
                record = claim.ranges(1)
                if record:
                    log.info("session %s: home here now (revision %d)", session_id, revision)
                    self._adopt(record[0], claim.ranges(2))
                else:
                    self._release(session_id, owner)
                return Located(None, revision, reloaded=True)
        raise RetryableError(f"session {session_id!r}: its home kept changing; retry")

    async def _hold(self, session_id: str, owner: str, revision: int) -> Located:
        """This scheduler is the home: the copy held here, re-read if it is not the record's revision."""
        held = self.sessions.peek(session_id, owner)
        if held is not None and held.revision == revision:
            return Located(None, revision)
        records, ledgers = await self._read(session_id, owner) if revision else ([], [])
        if not records:
            self._release(session_id, owner)
            return Located(None, 0, reloaded=True)
        self._adopt(records[0], ledgers)
        return Located(None, records[0].mod_revision, reloaded=True)

    async def _read(self, session_id: str, owner: str) -> tuple[list[KeyValue], list[KeyValue]]:
        """The session's record and KV ledger, read at one revision."""
        read = await self.etcd.txn(
            [], [range_op(self.keys.session(owner, session_id)), range_op(self.keys.kv_ledger(owner, session_id))]
        )
        return read.ranges(0), read.ranges(1)

    def _adopt(self, record: KeyValue, ledgers: list[KeyValue]) -> None:
        session = _session_of(record, ledgers)
        self._release(session.session_id, session.owner)
        self.sessions.adopt(session)
        self._on_hold(session)

    def _release(self, session_id: str, owner: str) -> None:
        dropped = self.sessions.drop(session_id, owner)
        if dropped is not None:
            self._on_release(dropped)

    async def read(self, session_id: str, owner: str) -> Session | None:
        """A copy of the session's record as it is now (a fork's parent, wherever its home is)."""
        records, ledgers = await self._read(session_id, owner)
        return _session_of(records[0], ledgers) if records else None

    async def created(self, session: Session) -> None:
        """Write a session just opened here, with this scheduler as its home; ValueError (and the
        copy dropped) if a record of that id exists."""
        home_key, record_key = (
            self.keys.home(session.owner, session.session_id),
            self.keys.session(session.owner, session.session_id),
        )
        try:
            written = await self.etcd.txn(
                [version_is(record_key, 0)],
                [put_op(record_key, encode_record(session)), put_op(home_key, self._me, self.membership.lease)],
            )
        except BaseException:
            self.sessions.drop(session.session_id, session.owner)
            raise
        if not written.succeeded:
            self.sessions.drop(session.session_id, session.owner)
            raise ValueError(f"session {session.session_id} already exists")
        session.revision = written.revision

    async def commit(
        self, session: Session, history: list[int], client_state: dict[str, Any] | None, ledger: KVLedger
    ) -> None:
        """Replace the record by the session with one more turn (`history`, and the front's
        `client_state` if given) and its KV ledger by `ledger`, only if the record is still at the
        copy's revision and this scheduler still its home; SessionMoved (nothing written)
        otherwise. A session without a record (a stateless completion's) has nothing to commit."""
        if not session.revision:
            return
        after = Session(
            session.session_id,
            tenant=session.tenant,
            agent=session.agent,
            parent_id=session.parent_id,
            info=session.info,
            history=history,
            turns=session.turns + 1,
            owner=session.owner,
            client_state=session.client_state if client_state is None else client_state,
            created_at=session.created_at,
        )
        record_key = self.keys.session(session.owner, session.session_id)
        home_key = self.keys.home(session.owner, session.session_id)
        written = await self.etcd.txn(
            [
                mod_revision_is(record_key, session.revision),
                value_is(home_key, self._me),
                lease_is(home_key, self.membership.lease),
            ],
            [
                put_op(record_key, encode_record(after)),
                put_op(self.keys.kv_ledger(session.owner, session.session_id), ledger.encode()),
            ],
        )
        if not written.succeeded:
            raise SessionMoved(
                f"session {session.session_id!r} moved to another scheduler during the turn; not committed, retry"
            )
        session.revision = written.revision

    async def closed(self, session: Session) -> None:
        """Delete the record and home key of a session closed here (its home)."""
        await self.etcd.txn(
            [value_is(self.keys.home(session.owner, session.session_id), self._me)],
            [
                delete_op(self.keys.session(session.owner, session.session_id)),
                delete_op(self.keys.home(session.owner, session.session_id)),
                delete_op(self.keys.kv_ledger(session.owner, session.session_id)),
            ],
        )

    def expired(self, sessions: Iterable[Session]) -> None:
        """Delete, in the background, the records of sessions this scheduler closed for idleness."""
        for session in sessions:
            task = asyncio.create_task(self._delete_quietly(session), name=f"expire-{session.session_id}")
            self._deletes.add(task)
            task.add_done_callback(self._deletes.discard)

    async def _delete_quietly(self, session: Session) -> None:
        try:
            await self.closed(session)
        except EtcdError as exc:
            log.warning("deleting expired session %s from etcd failed: %s", session.session_id, exc)

    async def wait_moved(self, session_id: str, owner: str, located: Located, timeout_s: float) -> bool:
        """Until the session's home key is no longer the one `located` found (its scheduler's lease
        lapsed or was revoked, or the key was claimed since); False if it still is after `timeout_s`."""
        home_key = self.keys.home(owner, session_id)
        deadline = asyncio.get_running_loop().time() + timeout_s
        while True:
            home = await self.etcd.get(home_key)
            if home is None or home.mod_revision != located.home_revision:
                return True
            if asyncio.get_running_loop().time() >= deadline:
                return False
            await asyncio.sleep(MOVE_POLL_S)

    async def aclose(self) -> None:
        await asyncio.gather(*self._deletes, return_exceptions=True)


def _session_of(record: KeyValue, ledgers: list[KeyValue]) -> Session:
    """The session a record holds, as a copy at the record's revision, with the KV ledger its last
    turn wrote (none when the ledger is not from the same transaction as the record)."""
    session = decode_record(record.value)
    session.revision = record.mod_revision
    if ledgers and ledgers[0].mod_revision == record.mod_revision:
        ledger = KVLedger.decode(ledgers[0].value)
        session.kv_holder, session.context = ledger.holder, ledger.context
    return session
