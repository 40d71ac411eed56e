"""A fake scheduler core: the gateway's whole view of the core, scripted and recorded."""

from __future__ import annotations

import asyncio
import json
from dataclasses import dataclass, field

from aiohttp.test_utils import TestClient, TestServer

from agentserve.common.errors import NotFoundError
from agentserve.contracts import SamplingParams, TokenLogprob
from agentserve.scheduler.http.app import build_app

REPLY = "hello world"


@dataclass
class FakeMetadata:
    turn_id: str
    turn_index: int
    prompt_tokens: int
    cached_tokens: int
    prefill_engine: str = "prefill-0"
    decode_engine: str = "decode-0"
    trace_id: str = "0af7651916cd43dd8448eb211c80319c"


@dataclass
class FakeEvent:
    metadata: FakeMetadata | None
    token_ids: list[int]
    text: str
    finished: bool = False
    finish_reason: str | None = None
    completion_tokens: int = 0
    logprobs: list = field(default_factory=list)


class FakeTokenizer:
    """One token per UTF-8 byte, offset past BOS; a tag-per-role chat template."""

    vocab_size = 300
    bos = 1

    def encode(self, text: str, add_bos: bool = False) -> list[int]:
        return ([self.bos] if add_bos else []) + [b + 2 for b in text.encode()]

    def decode(self, ids, skip_special_tokens: bool = True) -> str:
        return bytes(i - 2 for i in ids if i >= 2).decode(errors="replace")

    def apply_chat_template(self, messages, add_generation_prompt: bool = True, *, tools=None) -> str:
        text = "".join(f"<tools>{json.dumps(tools)}\n" for _ in [tools] if tools)
        text += "".join(f"<{m['role']}>{m['content']}{_calls(m)}\n" for m in messages)
        return text + ("<assistant>" if add_generation_prompt else "")


def _calls(message) -> str:
    return "".join(f"<call>{json.dumps(c['function'])}" for c in message.get("tool_calls", []))


@dataclass
class FakeSession:
    system_prompt: str
    tenant: str
    tokens: int = 0
    turns: list[tuple[str, str]] = field(default_factory=list)  # (role, message)
    tools: list = field(default_factory=list)
    info: object = None  # the AgentInfo it was opened with
    state: dict = field(default_factory=dict)  # what the gateway saved (a turn's client_state)


class FakeCore:
    def __init__(self, reply: str = REPLY) -> None:
        self.tokenizer = FakeTokenizer()
        self.model_names = ["tiny-llama"]
        self.reply = reply
        self.sessions: dict[str, FakeSession] = {}
        self.completed: list[tuple[list[int], SamplingParams, str]] = []
        self.segments: list = []  # each turn's or completion's TurnSegments (None: a plain one)
        self.fail_before: BaseException | None = None  # raised before the first event
        self.fail_after: BaseException | None = None  # raised after the first text event
        self.missing: list[str] = []  # what missing_engines() reports

    def missing_engines(self) -> list[str]:
        return list(self.missing)

    async def open_session(
        self,
        tenant="",
        agent="",
        parent_session_id="",
        system_prompt="",
        session_id=None,
        tools=(),
        owner="",
        info=None,
    ):
        if session_id in self.sessions:
            raise ValueError(f"session {session_id} already exists")
        self.sessions[session_id] = FakeSession(system_prompt, tenant, tools=list(tools), info=info)
        return session_id

    async def turn(
        self,
        session_id,
        *,
        message=None,
        token_ids=None,
        role="user",
        sampling,
        owner="",
        segments=None,
        client_state=None,
    ):
        self.segments.append(segments)
        session = self.sessions.get(session_id)
        if session is None:
            raise NotFoundError(f"unknown session {session_id}")
        new_tokens = len(self.tokenizer.encode(message or ""))
        cached = session.tokens
        async for event in self._generate(cached + new_tokens, cached, sampling, len(session.turns)):
            yield event
            if event.finished:
                session.turns.append((role, message))
                session.tokens = cached + new_tokens + event.completion_tokens
                if client_state is not None:
                    session.state = dict(client_state)

    async def complete(self, prompt_token_ids, sampling, tenant="", segments=None):
        self.segments.append(segments)
        self.completed.append((list(prompt_token_ids), sampling, tenant))
        async for event in self._generate(len(prompt_token_ids), 0, sampling, 0):
            yield event

    def session_state(self, session_id, owner=""):
        session = self.sessions.get(session_id)
        return None if session is None else dict(session.state)

    async def close_session(self, session_id, owner=""):
        session = self.sessions.pop(session_id, None)
        if session is None:
            raise NotFoundError(f"unknown session {session_id}")
        return len(session.turns), session.tokens

    async def _generate(self, prompt_tokens, cached_tokens, sampling, turn_index):
        if self.fail_before is not None:
            raise self.fail_before
        await asyncio.sleep(0)
        text = self.reply[: sampling.max_tokens]
        reason = "length" if len(self.reply) > sampling.max_tokens else "stop"
        yield FakeEvent(FakeMetadata(f"turn-{turn_index}", turn_index, prompt_tokens, cached_tokens), [], "")
        for ch in text:
            logprobs = [] if sampling.logprobs is None else [TokenLogprob(ord(ch) + 2, -0.5, ((ord(ch) + 2, -0.5),))]
            yield FakeEvent(None, [ord(ch) + 2], ch, logprobs=logprobs)
            if self.fail_after is not None:
                raise self.fail_after
        yield FakeEvent(None, [], "", True, reason, len(text))


def serve(core: FakeCore, scenario, **app_kwargs):
    """Run `await scenario(client)` against the gateway app over loopback; returns its result."""

    async def main():
        async with TestClient(TestServer(build_app(core, **app_kwargs))) as client:
            return await scenario(client)

    return asyncio.run(main())
