"""Sessions: the server-side token history of an agent conversation, turn after turn.

Clients send only each turn's new message; the scheduler keeps the history so the next prompt
extends the previous one token for token and every earlier block stays a cache hit. A session's
lock serialises its turns: turn N+1 is built on turn N's committed history.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from agentserve.common.errors import NotFoundError
from agentserve.scheduler.tool_waits import ToolWaitState

MAX_SESSION_ID_LENGTH = 128


@dataclass
class Session:
    session_id: str
    tenant: str = ""
    agent: str = ""
    parent_id: str = ""
    # Rendered together with the first text turn (templates treat a leading system message specially).
    pending_system: str = ""
    # Tool definitions (OpenAI function tools) the chat template lists with that first turn.
    pending_tools: tuple[dict[str, Any], ...] = ()
    history: list[int] = field(default_factory=list)  # committed turns only
    turns: int = 0
    # The decode engine that ran the last turn and so holds the history's KV: the next turn goes
    # there if it is alive, and the prefill hands it only the blocks it lacks.
    kv_holder: str = ""
    closed: bool = False
    created_at: float = field(default_factory=time.time)
    last_used: float = field(default_factory=time.time)
    tools: ToolWaitState = field(default_factory=ToolWaitState)
    lock: asyncio.Lock = field(default_factory=asyncio.Lock, repr=False)

    @property
    def waiting_tool(self) -> bool:
        return self.tools.waiting

    def commit(self, tokens: list[int], kv_holder: str = "") -> None:
        """Record a completed turn: `tokens` is the whole new history (its prompt plus its output),
        `kv_holder` the decode engine that now holds its KV."""
        self.history = tokens
        self.kv_holder = kv_holder
        self.turns += 1
        self.pending_system = ""
        self.pending_tools = ()
        self.last_used = time.time()


class SessionStore:
    def __init__(self) -> None:
        self._sessions: dict[str, Session] = {}

    def __len__(self) -> int:
        return len(self._sessions)

    def __contains__(self, session_id: str) -> bool:
        return session_id in self._sessions

    def create(
        self,
        tenant: str = "",
        agent: str = "",
        parent_id: str = "",
        system_prompt: str = "",
        session_id: str | None = None,
        tools: Sequence[dict[str, Any]] = (),
    ) -> Session:
        """A new session. With `parent_id` it starts from the parent's committed history (a
        sub-agent fork) in the parent's tenant. `session_id` picks the id (HTTP session header);
        ValueError if it is malformed or taken."""
        if session_id is None:
            session_id = uuid.uuid4().hex
        else:
            check_session_id(session_id)
            if session_id in self._sessions:
                raise ValueError(f"session {session_id} already exists")
        session = Session(
            session_id,
            tenant=tenant,
            agent=agent,
            parent_id=parent_id,
            pending_system=system_prompt,
            pending_tools=tuple(tools),
        )
        if parent_id:
            parent = self.get(parent_id)
            if tenant and tenant != parent.tenant:
                raise ValueError("a forked session must stay in its parent's tenant")
            session.tenant = parent.tenant
            session.history = list(parent.history)
            session.kv_holder = parent.kv_holder  # the shared prefix's KV is there
            # A system prompt the parent never used carries over; the child's own one, if any, is
            # rendered with its first turn after the inherited history.
            session.pending_system = system_prompt or parent.pending_system
            session.pending_tools = tuple(tools) or parent.pending_tools
            if session.pending_tools and session.history:
                # Templates list tools at the start of a conversation, which a fork is past.
                raise ValueError("tools need a session that starts a conversation, not a fork of one with history")
        self._sessions[session_id] = session
        return session

    def get(self, session_id: str) -> Session:
        session = self._sessions.get(session_id)
        if session is None:
            raise NotFoundError(f"unknown session {session_id!r}")
        return session

    def close(self, session_id: str) -> Session:
        """Forget a session. A turn still running on it finishes, but commits to nothing reachable."""
        session = self._sessions.pop(session_id, None)
        if session is None:
            raise NotFoundError(f"unknown session {session_id!r}")
        session.closed = True
        return session


def check_session_id(session_id: str) -> None:
    if not session_id or len(session_id) > MAX_SESSION_ID_LENGTH:
        raise ValueError(f"session id must be 1 to {MAX_SESSION_ID_LENGTH} characters")
    if not session_id.isprintable() or any(c.isspace() for c in session_id):
        raise ValueError("session id must be printable, without spaces")
