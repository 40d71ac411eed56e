"""Chat requests tied to a server-side session by the `X-Session-Id` header.

OpenAI-style clients (the openai SDK, aiperf) resend the whole conversation every request, but a
scheduler session already holds its history, token for token. The gateway therefore forwards only
the messages the session has not seen. Its rule, per session id:

* It counts the client-written messages (every role but `assistant`) the session has consumed.
  Assistant messages in a request are the replies the session itself generated, so they are
  already in its history; clients that echo them and clients that omit them both work.
* The new messages are the client-written ones past that count. One is sent as the turn's
  message; several (e.g. parallel tool results) are joined by a blank line and sent with the
  role of the last one. The last must be `user` or `tool`.
* A leading `system` (or `developer`) message becomes the session's system prompt when the
  gateway opens it; a system message later in a conversation is rejected. The request's `tools`
  are rendered with the first turn too, so every later request must carry the same tools.
* A request with more assistant messages than the session generated replies carries history the
  session never saw (few-shot examples, edited replies): rejected, use a request without the
  header. A request whose history is not longer than what was consumed is rejected too.
* The count advances only when a turn finishes; a failed or abandoned turn leaves it unchanged,
  matching the core's guarantee that a failed turn leaves the session history unchanged.

Requests for one session run one at a time (a per-session lock), because each turn's prefix is
the previous turn's output. With API keys a session id is the caller's tenant's own: two tenants
sending the same id hold two sessions that never meet.
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections import OrderedDict
from collections.abc import AsyncGenerator, Sequence
from dataclasses import dataclass, field
from typing import Any

from agentserve.common.errors import NotFoundError
from agentserve.contracts import AgentInfo, SamplingParams
from agentserve.contracts.turn_segments import TurnSegments
from agentserve.scheduler.http.core_api import CoreAPI, TurnEventAPI
from agentserve.scheduler.http.schemas import SYSTEM_ROLES, Message

log = logging.getLogger(__name__)

DEFAULT_MAX_SESSIONS = 100_000
TURN_ROLES = frozenset({"user", "tool"})


@dataclass(frozen=True)
class TurnInput:
    """What one request appends to a session: the core's `turn(message=, role=)` arguments."""

    message: str
    role: str
    consumed_after: int  # the client-written message count once this turn finishes


@dataclass
class SessionProgress:
    consumed: int = 0  # client-written (non-assistant) messages already in the session
    replies: int = 0  # assistant replies the session generated
    opened: bool = False
    tools: str = ""  # the tools the session was opened with, as canonical JSON
    lock: asyncio.Lock = field(default_factory=asyncio.Lock)

    def state(self) -> dict[str, Any]:
        return {"consumed": self.consumed, "replies": self.replies, "tools": self.tools}

    @classmethod
    def of(cls, state: dict[str, Any] | None) -> SessionProgress:
        """Progress saved on a core session (`state`), or a fresh one for a session not opened yet."""
        if not state:
            return cls()
        return cls(consumed=state["consumed"], replies=state["replies"], opened=True, tools=state["tools"])


def system_prompt_of(messages: Sequence[Message]) -> str | None:
    first = messages[0]
    return first.content if first.role in SYSTEM_ROLES else None


def plan_turn(session_id: str, messages: Sequence[Message], consumed: int, replies: int) -> TurnInput:
    """The part of `messages` the session has not seen, as one turn input (rules in the module doc)."""
    written = [m for m in messages if m.role != "assistant"]
    echoed = len(messages) - len(written)
    if echoed > replies:
        raise ValueError(
            f"session {session_id} generated {replies} assistant replies but the request "
            f"carries {echoed}; history the session never saw needs a request without "
            "X-Session-Id"
        )
    new = written[consumed:]
    if not new:
        raise ValueError(
            f"session {session_id} already holds {consumed} client messages and the request "
            f"has {len(written)}; send the full history plus a new user or tool message, "
            "or use a new session id"
        )
    if any(m.role in SYSTEM_ROLES for m in new) and consumed > 0:
        raise ValueError(f"session {session_id}: a system message is only accepted as the first message")
    new = [m for m in new if m.role not in SYSTEM_ROLES]  # the opening system prompt, consumed on open
    if not new or new[-1].role not in TURN_ROLES:
        raise ValueError(f"session {session_id}: the last new message must have role 'user' or 'tool'")
    return TurnInput("\n\n".join(m.content for m in new), new[-1].role, len(written))


class ChatSessions:
    """Maps X-Session-Id to core sessions and remembers how much of each conversation they hold.

    Progress is bounded LRU: past `max_sessions`, the idle session used longest ago is forgotten
    here; it is also saved on the core session with every turn, so a later request (or a
    restarted scheduler with durable sessions) picks it up from there.
    """

    def __init__(self, core: CoreAPI, max_sessions: int = DEFAULT_MAX_SESSIONS) -> None:
        if max_sessions < 1:
            raise ValueError(f"max_sessions must be positive, got {max_sessions}")
        self._core = core
        self._max_sessions = max_sessions
        self._progress: OrderedDict[tuple[str, str], SessionProgress] = OrderedDict()  # by (owner, id)

    def __len__(self) -> int:
        return len(self._progress)

    def progress(self, session_id: str, owner: str = "") -> SessionProgress | None:
        return self._progress.get((owner, session_id))

    async def turn(
        self,
        session_id: str,
        messages: Sequence[Message],
        sampling: SamplingParams,
        tenant: str = "",
        tools: Sequence[dict[str, Any]] = (),
        owner: str = "",
        agent: AgentInfo | None = None,
        segments: TurnSegments | None = None,
    ) -> AsyncGenerator[TurnEventAPI, None]:
        """Open the session if this gateway has not (as `agent`, if given), then stream one turn
        of the new messages.

        Callers must close the iterator (e.g. `contextlib.aclosing`) so the session lock is
        released when a client goes away mid-stream.
        """
        key = (owner, session_id)
        progress = self._touch(key)
        tools_key = json.dumps(list(tools), sort_keys=True)
        async with progress.lock:
            consumed = progress.consumed
            if not progress.opened:
                system = system_prompt_of(messages)
                await self._core.open_session(
                    tenant=tenant,
                    agent=agent.agent if agent is not None else "",
                    system_prompt=system or "",
                    session_id=session_id,
                    tools=tools,
                    owner=owner,
                    info=agent,
                )
                progress.opened, progress.tools = True, tools_key
                consumed = int(system is not None)
                progress.consumed = consumed
            elif tools_key != progress.tools:
                raise ValueError(
                    f"session {session_id}: 'tools' differ from the ones it started with; a session's "
                    "prompt lists its tools from the first turn on, so send the same tools or use a new session"
                )
            plan = plan_turn(session_id, messages, consumed, progress.replies)
            finished = False
            # Saved with the turn's commit (a restarted scheduler with durable sessions, another
            # scheduler that takes the session over, or a gateway that forgot this progress picks
            # the conversation up where it was): never a turn without its progress.
            after = SessionProgress(plan.consumed_after, progress.replies + 1, True, progress.tools)
            try:
                turn = self._core.turn(
                    session_id,
                    message=plan.message,
                    role=plan.role,
                    sampling=sampling,
                    owner=owner,
                    segments=segments,
                    client_state=after.state(),
                )
                async for event in turn:
                    finished = finished or event.finished
                    yield event
            except NotFoundError:
                self._progress.pop(key, None)  # closed (or expired) behind our back: reopen next time
                raise
            if finished:
                progress.consumed, progress.replies = after.consumed, after.replies

    def forget(self, session_id: str, owner: str = "") -> None:
        """Drop this gateway's progress of a session (its core copy was re-read from shared state):
        the next request reads it from the session."""
        progress = self._progress.get((owner, session_id))
        if progress is not None and not progress.lock.locked():
            del self._progress[(owner, session_id)]

    async def close(self, session_id: str, owner: str = "") -> tuple[int, int]:
        """Close the owner's core session and forget its progress; NotFoundError if the core has no such session."""
        self._progress.pop((owner, session_id), None)
        return await self._core.close_session(session_id, owner=owner)

    def _touch(self, key: tuple[str, str]) -> SessionProgress:
        progress = self._progress.get(key)
        if progress is None:
            self._evict(keep=key)
            owner, session_id = key
            progress = self._progress[key] = SessionProgress.of(self._core.session_state(session_id, owner))
        self._progress.move_to_end(key)
        return progress

    def _evict(self, keep: tuple[str, str]) -> None:
        excess = len(self._progress) + 1 - self._max_sessions
        if excess <= 0:
            return
        idle = [sid for sid, p in self._progress.items() if sid != keep and not p.lock.locked()]
        for session_id in idle[:excess]:
            log.warning(
                "forgetting gateway progress of idle session %s (over %d sessions)", session_id[1], self._max_sessions
            )
            del self._progress[session_id]
