"""An in-memory serving system behind the replayer's client protocols: server-side session history,
a prefix cache of 16-token blocks keyed by whole prefix (per tenant), a fixed time per token, and a
log of when every turn and tool call ran."""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass, field

from agentserve.bench.papers.replay.client import Chunk, ServerBusy

BLOCK = 16


@dataclass
class Event:
    kind: str  # "turn" | "tool"
    session: str  # server session id
    tenant: str
    agent: str
    start: float
    end: float = 0.0
    sent: list[int] = field(default_factory=list)
    prompt: list[int] = field(default_factory=list)


class FakeSession:
    def __init__(self, system: FakeServing, sid: str, tenant: str, agent: str) -> None:
        self.system, self.id, self.tenant, self.agent = system, sid, tenant, agent
        self.history: list[int] = []
        self.closed = False

    async def turn(self, token_ids: list[int], max_tokens: int):
        s = self.system
        if s.busy_turns:  # refused for now, as KV admission does: nothing sent, nothing kept
            s.busy_turns -= 1
            raise ServerBusy("KV committed fills the pools; retry later", s.retry_after_s)
        event = Event("turn", self.id, self.tenant, self.agent, time.monotonic(), sent=list(token_ids))
        s.events.append(event)
        s.in_flight += 1
        s.max_in_flight = max(s.max_in_flight, s.in_flight)
        try:
            if s.fail_when is not None and s.fail_when(self, token_ids):
                raise RuntimeError("injected failure")
            prompt = self.history + list(token_ids)
            event.prompt = prompt
            cached = s.cached(self.tenant, prompt)
            output = [5 + (len(prompt) + i) % 8000 for i in range(max_tokens)]
            await asyncio.sleep(s.token_s)
            yield Chunk((output[0],), cached, len(prompt), "prefill-0", "decode-0")
            for tok in output[1:]:
                await asyncio.sleep(s.token_s)
                yield Chunk((tok,))
            self.history = prompt + output
            s.remember(self.tenant, self.history)
        finally:
            s.in_flight -= 1
            event.end = time.monotonic()

    async def call_tool(self, name: str, args: dict, predicted_s: float | None = None) -> dict:
        event = Event("tool", self.id, self.tenant, self.agent, time.monotonic())
        self.system.events.append(event)
        await asyncio.sleep(args["seconds"])
        event.end = time.monotonic()
        return {"slept_s": args["seconds"]}

    async def close(self) -> None:
        self.closed = True


class FakeServing:
    def __init__(
        self, token_s: float = 0.001, fail_when=None, busy_opens: int = 0, busy_turns: int = 0, retry_after_s=0.02
    ) -> None:
        """`busy_opens` / `busy_turns`: how many session opens and turns to refuse (ServerBusy) first."""
        self.token_s = token_s
        self.fail_when = fail_when
        self.busy_opens, self.busy_turns, self.retry_after_s = busy_opens, busy_turns, retry_after_s
        self.sessions: list[FakeSession] = []
        self.events: list[Event] = []
        self.blocks: set[tuple[str, tuple[int, ...]]] = set()
        self.in_flight = 0
        self.max_in_flight = 0

    def cached(self, tenant: str, prompt: list[int]) -> int:
        n = 0
        while (n + 1) * BLOCK <= len(prompt) - 1 and (tenant, tuple(prompt[: (n + 1) * BLOCK])) in self.blocks:
            n += 1
        return n * BLOCK

    def remember(self, tenant: str, tokens: list[int]) -> None:
        for k in range(1, len(tokens) // BLOCK + 1):
            self.blocks.add((tenant, tuple(tokens[: k * BLOCK])))

    async def open_session(self, tenant: str, agent: str, critical: bool = False) -> FakeSession:
        if self.busy_opens:
            self.busy_opens -= 1
            raise ServerBusy("KV committed fills the pools; retry later", self.retry_after_s)
        session = FakeSession(self, f"s{len(self.sessions)}", tenant, agent)
        self.sessions.append(session)
        return session

    async def close(self) -> None:
        pass
