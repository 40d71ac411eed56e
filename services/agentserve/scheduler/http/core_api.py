"""What the HTTP gateway needs from the scheduler core, written as a Protocol.

The gateway is a translator: it never reaches past these members, so tests drive it with a fake
core and the real `SchedulerCore` satisfies it structurally. `owner` is the API key's tenant ("" without
keys): a session is found only under the owner that opened it.
"""

from __future__ import annotations

from collections.abc import AsyncGenerator, Sequence
from typing import Any, Protocol

from agentserve.contracts import AgentInfo, SamplingParams
from agentserve.contracts.turn_segments import TurnSegments


class TokenizerAPI(Protocol):
    vocab_size: int

    def encode(self, text: str, add_bos: bool = False) -> list[int]: ...

    def decode(self, ids: Sequence[int], skip_special_tokens: bool = True) -> str: ...

    def apply_chat_template(
        self,
        messages: Sequence[dict[str, Any]],
        add_generation_prompt: bool = True,
        *,
        tools: Sequence[dict[str, Any]] | None = None,
    ) -> str: ...


class TurnEventAPI(Protocol):
    """One streamed step of a turn; the first carries `metadata`, the last has `finished` set."""

    metadata: Any  # turn_id, turn_index, prompt_tokens, cached_tokens, ..., trace_id; None after the first
    token_ids: list[int]
    text: str
    finished: bool
    finish_reason: str | None
    completion_tokens: int
    logprobs: list[Any]  # TokenLogprob per token id, when the request asked for logprobs


class CoreAPI(Protocol):
    tokenizer: TokenizerAPI
    model_names: list[str]

    def missing_engines(self) -> list[str]:
        """What the core lacks to serve a turn ("prefill engine", "decode engine"); empty when ready."""
        ...

    async def open_session(
        self,
        tenant: str = "",
        agent: str = "",
        parent_session_id: str = "",
        system_prompt: str = "",
        session_id: str | None = None,
        tools: Sequence[dict[str, Any]] = (),
        owner: str = "",
        info: AgentInfo | None = None,
    ) -> str: ...

    def turn(
        self,
        session_id: str,
        *,
        message: str | None = None,
        token_ids: list[int] | None = None,
        role: str = "user",
        sampling: SamplingParams,
        owner: str = "",
        segments: TurnSegments | None = None,
        client_state: dict[str, Any] | None = None,
    ) -> AsyncGenerator[TurnEventAPI, None]:
        """`client_state`: the gateway's progress once this turn is in, saved with the turn."""
        ...

    def complete(
        self,
        prompt_token_ids: list[int],
        sampling: SamplingParams,
        tenant: str = "",
        segments: TurnSegments | None = None,
    ) -> AsyncGenerator[TurnEventAPI, None]: ...

    async def close_session(self, session_id: str, owner: str = "") -> tuple[int, int]: ...

    def session_state(self, session_id: str, owner: str = "") -> dict[str, Any] | None:
        """What the gateway saved on the owner's session (a turn's `client_state`); None if there
        is no such session."""
        ...
