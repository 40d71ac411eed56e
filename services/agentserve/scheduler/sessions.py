"""Sessions: the server-side token history of an agent conversation, turn after turn.

Clients send only each turn's new message; the scheduler keeps the history so the next prompt
extends the previous one token for token and every earlier block stays a cache hit. A session's
lock serialises its turns: turn N+1 is built on turn N's committed history.

Sessions belong to the tenant that opened them (`SessionStore`): no other tenant can continue,
fork or close one, nor learn that it exists. Their number is capped, in all and per tenant, and an
idle one is closed after a TTL (`SessionLimits`). With a journal (`session_journal.py`) they
survive a scheduler restart. With state shared in etcd (`shared_sessions.py`) the store holds the
sessions this scheduler is home to, each a copy of its record in etcd at `revision`.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from agentserve.common.errors import NotFoundError, Overloaded
from agentserve.contracts import AgentInfo
from agentserve.contracts.context import ContextLayout
from agentserve.scheduler.tool_waits import ToolWaitState

MAX_SESSION_ID_LENGTH = 128


@dataclass
class Session:
    session_id: str
    tenant: str = ""  # whose cache blocks the session may share (salts its block hashes)
    agent: str = ""
    parent_id: str = ""
    info: AgentInfo = field(default_factory=AgentInfo)  # DAG parents, critical path, priority
    # Rendered together with the first text turn (templates treat a leading system message specially).
    pending_system: str = ""
    # Tool definitions (OpenAI function tools) the chat template lists with that first turn.
    pending_tools: tuple[dict[str, Any], ...] = ()
    history: list[int] = field(default_factory=list)  # committed turns only
    turns: int = 0
    # The decode engine that ran the last turn and so holds the history's KV: the next turn goes
    # there if it is alive, and the prefill hands it only the blocks it lacks.
    kv_holder: str = ""
    # The last turn's prompt KV as stored after it reused shared blocks (TokenDance): the next
    # reusing turn restores its history from it. None after a turn computed exactly.
    context: ContextLayout | None = None
    closed: bool = False
    owner: str = ""  # the tenant of the API key that opened it ("" without keys): who may use it
    client_state: dict[str, Any] = field(default_factory=dict)  # the HTTP gateway's progress (JSON)
    created_at: float = field(default_factory=time.time)
    last_used: float = field(default_factory=time.monotonic)
    tools: ToolWaitState = field(default_factory=ToolWaitState)
    lock: asyncio.Lock = field(default_factory=asyncio.Lock, repr=False)
    # Called after each commit (the store's journal, when sessions are durable).
    on_commit: Callable[[Session], None] | None = field(default=None, repr=False, compare=False)
    # With state in etcd: the revision of the session's record this copy equals (0: no record, as
    # a stateless completion's session has none). A turn commits only if the record is still there.
    revision: int = 0

    @property
    def waiting_tool(self) -> bool:
        return self.tools.waiting

    def commit(
        self,
        tokens: list[int],
        kv_holder: str = "",
        client_state: dict[str, Any] | None = None,
        context: ContextLayout | None = None,
    ) -> None:
        """Record a completed turn: `tokens` is the whole new history (its prompt plus its output),
        `kv_holder` the decode engine that now holds its KV, `client_state` (if given) the front's
        progress once this turn is in (saved with the turn, so the two never disagree), `context`
        its prompt's reused KV as stored (None: its KV is a full recompute's)."""
        self.history = tokens
        self.kv_holder = kv_holder
        self.context = context
        self.turns += 1
        self.pending_system = ""
        self.pending_tools = ()
        if client_state is not None:
            self.client_state = dict(client_state)
        if self.on_commit is not None and not self.closed:
            self.on_commit(self)


class Journal(Protocol):
    """Where durable sessions are written (`session_journal.SessionJournal`)."""

    def save(self, session: Session) -> None: ...

    def delete(self, session: Session) -> None: ...

    def load(self) -> list[Session]: ...


@dataclass(frozen=True)
class SessionLimits:
    """How many sessions may be open, and for how long an idle one is kept."""

    max_sessions: int = 100_000  # all tenants together
    max_per_tenant: int = 10_000
    idle_ttl_s: float = 3600.0  # a session unused this long is closed

    def __post_init__(self) -> None:
        for name in ("max_sessions", "max_per_tenant"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be positive, got {getattr(self, name)}")
        if not self.idle_ttl_s > 0:
            raise ValueError(f"idle_ttl_s must be positive, got {self.idle_ttl_s}")


class SessionStore:
    """Open sessions, each filed under its owner: the tenant of the API key that opened it, or ""
    when keys are off. An id is looked up under the caller's owner only, so another tenant's id
    is exactly as unknown as one never opened (no existence oracle), and two tenants may pick the
    same HTTP session id without meeting."""

    def __init__(
        self,
        limits: SessionLimits = SessionLimits(),
        clock: Callable[[], float] = time.monotonic,
        journal: Journal | None = None,
    ) -> None:
        """With a `journal`, the sessions it holds are open again and every change is written to it."""
        self.limits = limits
        self._clock = clock
        self._journal = journal
        self._sessions: dict[str, dict[str, Session]] = {}  # session id -> owner -> session
        self._per_tenant: Counter[str] = Counter()
        self._count = 0
        for session in journal.load() if journal is not None else ():
            session.last_used = clock()
            self._add(session)

    def save(self, session: Session) -> None:
        """Write a changed session (its `client_state`) to the journal, if sessions are durable."""
        if self._journal is not None and not session.closed:
            self._journal.save(session)

    def __len__(self) -> int:
        return self._count

    def __iter__(self) -> Iterator[Session]:
        """Every open session (a snapshot: the store may change while the caller iterates)."""
        return iter([s for owners in self._sessions.values() for s in owners.values()])

    def __contains__(self, session_id: str) -> bool:
        return session_id in self._sessions

    def exists(self, session_id: str, owner: str = "") -> bool:
        return owner in self._sessions.get(session_id, {})

    def create(  # noqa: PLR0913 - a session's fields, each with a default, and the parent's copy
        self,
        tenant: str = "",
        agent: str = "",
        parent_id: str = "",
        system_prompt: str = "",
        session_id: str | None = None,
        tools: Sequence[dict[str, Any]] = (),
        owner: str = "",
        info: AgentInfo | None = None,
        parent: Session | None = None,
    ) -> Session:
        """A new session of `owner`, as agent `info` (its `agent` wins over `agent`) if given.
        With `parent_id` (one of the owner's sessions; `parent`, if given, is its copy read from
        shared state) it starts from the parent's committed history (a sub-agent fork) in the
        parent's tenant. `session_id` picks the id (HTTP session
        header); ValueError if it is malformed or the owner already has it. Overloaded past the
        session caps (idle sessions past their TTL are closed first)."""
        if session_id is None:
            session_id = uuid.uuid4().hex
        else:
            check_session_id(session_id)
            if self.exists(session_id, owner):
                raise ValueError(f"session {session_id} already exists")
        if parent is None and parent_id:
            parent = self.get(parent_id, owner)
        if parent is not None and tenant and tenant != parent.tenant:
            raise ValueError("a forked session must stay in its parent's tenant")
        session = Session(
            session_id,
            tenant=parent.tenant if parent is not None else tenant,
            agent=info.agent if info is not None and info.agent else agent,
            parent_id=parent_id,
            info=info or AgentInfo(agent),
            pending_system=system_prompt,
            pending_tools=tuple(tools),
            owner=owner,
            last_used=self._clock(),
        )
        if parent is not None:
            session.history = list(parent.history)
            session.kv_holder = parent.kv_holder  # the shared prefix's KV is there
            # A system prompt the parent never used carries over; the child's own one, if any, is
            # rendered with its first turn after the inherited history.
            session.pending_system = system_prompt or parent.pending_system
            session.pending_tools = tuple(tools) or parent.pending_tools
            if session.pending_tools and session.history:
                # Templates list tools at the start of a conversation, which a fork is past.
                raise ValueError("tools need a session that starts a conversation, not a fork of one with history")
        self._make_room(session.tenant)
        self._add(session)
        self.save(session)
        return session

    def _add(self, session: Session) -> None:
        self._sessions.setdefault(session.session_id, {})[session.owner] = session
        self._per_tenant[session.tenant] += 1
        self._count += 1
        if self._journal is not None:
            session.on_commit = self._journal.save

    def get(self, session_id: str, owner: str = "") -> Session:
        """The owner's session of that id; NotFoundError if it has none (or it expired)."""
        session = self._sessions.get(session_id, {}).get(owner)
        if session is None or self._expire_if_idle(session):
            raise NotFoundError(f"unknown session {session_id!r}")
        session.last_used = self._clock()
        return session

    def peek(self, session_id: str, owner: str = "") -> Session | None:
        """The owner's session of that id as held here, or None; neither touches nor expires it."""
        return self._sessions.get(session_id, {}).get(owner)

    def adopt(self, session: Session) -> None:
        """Hold `session` (a copy read from shared state), in place of any copy of it held here;
        a turn still running on the old copy commits to nothing reachable."""
        self.drop(session.session_id, session.owner)
        session.last_used = self._clock()
        self._add(session)

    def drop(self, session_id: str, owner: str = "") -> Session | None:
        """Forget the copy held here of a session whose record lives elsewhere (shared state)."""
        session = self.peek(session_id, owner)
        if session is not None:
            self._remove(session)
        return session

    def find(self, session_id: str) -> Session:
        """The session of that id whoever owns it, for internal-plane events (the tool proxy's
        call reports) that name a session without a tenant; NotFoundError unless exactly one has it."""
        owners = self._sessions.get(session_id, {})
        if len(owners) != 1:
            raise NotFoundError(f"unknown session {session_id!r}")
        return next(iter(owners.values()))

    def close(self, session_id: str, owner: str = "") -> Session:
        """Forget a session. A turn still running on it finishes, but commits to nothing reachable."""
        session = self._sessions.get(session_id, {}).get(owner)
        if session is None:
            raise NotFoundError(f"unknown session {session_id!r}")
        self._remove(session)
        return session

    def expire(self) -> list[Session]:
        """Close every session idle past the TTL (none with a turn running); returns them."""
        expired = [s for owners in self._sessions.values() for s in owners.values() if self._is_idle(s)]
        for session in expired:
            self._remove(session)
        return expired

    def _is_idle(self, session: Session) -> bool:
        return not session.lock.locked() and self._clock() - session.last_used > self.limits.idle_ttl_s

    def _expire_if_idle(self, session: Session) -> bool:
        if not self._is_idle(session):
            return False
        self._remove(session)
        return True

    def _remove(self, session: Session) -> None:
        owners = self._sessions.get(session.session_id, {})
        if owners.get(session.owner) is not session:
            return
        del owners[session.owner]
        if not owners:
            del self._sessions[session.session_id]
        self._per_tenant[session.tenant] -= 1
        if not self._per_tenant[session.tenant]:
            del self._per_tenant[session.tenant]
        self._count -= 1
        session.closed = True
        if self._journal is not None:
            self._journal.delete(session)

    def _make_room(self, tenant: str) -> None:
        if self._count < self.limits.max_sessions and self._per_tenant[tenant] < self.limits.max_per_tenant:
            return
        self.expire()
        ttl = self.limits.idle_ttl_s
        if self._count >= self.limits.max_sessions:
            raise Overloaded(
                f"the scheduler holds {self._count} open sessions, its limit; close sessions "
                f"(idle ones close after {ttl:.0f} s)",
                retry_after_s=min(ttl, 60.0),
            )
        if self._per_tenant[tenant] >= self.limits.max_per_tenant:
            raise Overloaded(
                f"tenant {tenant!r} has {self._per_tenant[tenant]} open sessions, its limit; close "
                f"sessions (idle ones close after {ttl:.0f} s)",
                retry_after_s=min(ttl, 60.0),
            )


def check_session_id(session_id: str) -> None:
    if not session_id or len(session_id) > MAX_SESSION_ID_LENGTH:
        raise ValueError(f"session id must be 1 to {MAX_SESSION_ID_LENGTH} characters")
    if not session_id.isprintable() or any(c.isspace() for c in session_id):
        raise ValueError("session id must be printable, without spaces")
