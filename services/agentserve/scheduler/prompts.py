"""PromptBuilder: a turn's request checked and turned into the tokens appended to the history.

Text messages go through the chat template (`ChatRenderer`); `token_ids` are appended raw, for
clients that render prompts themselves. Every limit is checked here so a bad request fails with a
ValueError before any engine or store is called.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from agentserve.common.errors import PayloadTooLarge
from agentserve.model_files.tokenizer import Tokenizer
from agentserve.scheduler.chat import ROLES, ChatRenderer
from agentserve.scheduler.sessions import Session

# Messages longer than this are tokenized on a worker thread, not on the event loop: a megabyte of
# text takes the tokenizer long enough to delay every other request and the engines' heartbeats.
OFFLOAD_BYTES = 16 << 10


class PromptBuilder:
    def __init__(self, tokenizer: Tokenizer, max_message_tokens: int, max_message_bytes: int = 1 << 20) -> None:
        self.tokenizer = tokenizer
        self.max_message_tokens = max_message_tokens
        self.max_message_bytes = max_message_bytes
        try:
            self.renderer: ChatRenderer | None = ChatRenderer(tokenizer)
        except ValueError:  # no (usable) chat template: such a model takes token_ids only
            self.renderer = None

    def check(self, message: str | None, token_ids: Sequence[int] | None, role: str, vocab_size: int) -> None:
        """What can be checked without the session history (so callers fail before streaming)."""
        if message and token_ids:
            raise ValueError("send either message or token_ids, not both")
        if not message and not token_ids:
            raise ValueError("message is empty")
        if token_ids:
            self._check_size(len(token_ids))
            bad = next((t for t in token_ids if not (isinstance(t, int) and 0 <= t < vocab_size)), None)
            if bad is not None:
                raise ValueError(f"token id {bad!r} is outside the vocabulary [0, {vocab_size})")
        else:
            check_text_size(message or "", self.max_message_bytes)
            if role not in ROLES:
                raise ValueError(f"role must be one of {', '.join(ROLES)}, got {role!r}")
            if self.renderer is None:
                raise ValueError("this model has no chat template: send token_ids instead of text")

    @staticmethod
    def offloaded(message: str | None) -> bool:
        """Whether `new_tokens` for this message should run off the event loop."""
        return message is not None and len(message) > OFFLOAD_BYTES // 4

    def new_tokens(
        self, session: Session, message: str | None, token_ids: Sequence[int] | None, role: str
    ) -> list[int]:
        """The tokens this turn appends to `session.history`. Call under the session's lock, after
        `check`: the result depends on the history's end."""
        history, tools = session.history, session.pending_tools
        if token_ids:
            system = []
            if session.pending_system or tools:
                pending = [_message("system", session.pending_system)] if session.pending_system else []
                system = self._render(history, pending, prompt=False, tools=tools)
            return system + list(token_ids)
        messages = [_message(role, message or "")]
        if session.pending_system:
            messages.insert(0, _message("system", session.pending_system))
        tokens = self._render(history, messages, prompt=True, tools=tools)
        self._check_size(len(tokens))
        return tokens

    def _render(
        self, history: Sequence[int], messages: list[dict[str, str]], prompt: bool, tools: Sequence[dict[str, Any]]
    ) -> list[int]:
        if self.renderer is None:
            raise ValueError("this model has no chat template: system prompts and tools need one")
        if not history:
            return self.renderer.first_turn(messages, add_generation_prompt=prompt, tools=tools)
        return self.renderer.next_turn(history, messages, add_generation_prompt=prompt)

    def _check_size(self, n: int) -> None:
        if n > self.max_message_tokens:
            raise ValueError(f"message is {n} tokens, over the limit of {self.max_message_tokens}")


def check_text_size(text: str, max_bytes: int, what: str = "message") -> None:
    """PayloadTooLarge past `max_bytes` of UTF-8, counted without encoding when it is clear."""
    # A character is 1-4 bytes: most texts are decided without building their encoding.
    if len(text) <= max_bytes // 4:
        return
    size = len(text) if len(text) > max_bytes else len(text.encode("utf-8", "surrogatepass"))
    if size > max_bytes:
        raise PayloadTooLarge(f"{what} is over the limit of {max_bytes} bytes")


def check_fits(prompt_tokens: int, max_tokens: int, max_context: int) -> None:
    if prompt_tokens + max_tokens > max_context:
        raise ValueError(
            f"prompt ({prompt_tokens} tokens) plus max_tokens ({max_tokens}) exceeds the "
            f"model's context of {max_context} tokens"
        )


def _message(role: str, content: str) -> dict[str, str]:
    return {"role": role, "content": content}
