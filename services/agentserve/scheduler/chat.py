"""ChatRenderer: a turn's new message as tokens that extend the session history exactly.

The first turn renders `[system?, message]` with the model's chat template. A later turn must not
re-render the conversation (the model's own output tokens could tokenize differently, and any
difference invalidates every cached block after it) nor render the message alone (a template may
open with BOS or a default system prompt). So a later turn renders the *difference* the template
makes when the message follows an assistant reply: it renders a placeholder conversation with and
without the new message and keeps the added suffix. The placeholder reply also tells how the
template closes an assistant message (ChatML: `<|im_end|>` then a newline); the part of that the
model did not generate itself (usually the newline after its stop token) goes in front.

Both renderings split at special tokens, so tokenizing the pieces separately gives the same ids as
tokenizing the whole conversation at once.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from agentserve.model_files.tokenizer import Tokenizer

# Placeholder contents: plain words no template rewrites, unlikely to appear in template text.
_USER = "agentserve-placeholder-question"
_REPLY = "agentserve-placeholder-reply"
ROLES = ("user", "tool", "system")


class ChatRenderer:
    def __init__(self, tokenizer: Tokenizer) -> None:
        self._tokenizer = tokenizer
        self._prior = [{"role": "user", "content": _USER}, {"role": "assistant", "content": _REPLY}]
        base = tokenizer.apply_chat_template(self._prior, add_generation_prompt=False)
        at = base.rfind(_REPLY)
        if at < 0:
            raise ValueError("the chat template drops assistant replies; cannot append turns to a history")
        self._base = base
        # What the template puts after an assistant reply's content.
        self._closing_text = base[at + len(_REPLY) :]
        self._closing = tokenizer.encode(self._closing_text)

    def first_turn(
        self,
        messages: Sequence[dict[str, str]],
        add_generation_prompt: bool = True,
        tools: Sequence[dict[str, Any]] = (),
    ) -> list[int]:
        """Tokens of a conversation's opening messages (ending with the assistant prompt), with
        the `tools` the template lists (OpenAI function tools; none: a prompt without tools)."""
        check_messages(messages)
        text = self._tokenizer.apply_chat_template(
            messages, add_generation_prompt=add_generation_prompt, tools=list(tools) or None
        )
        return self._tokenizer.encode(text)

    def next_turn(
        self, history: Sequence[int], messages: Sequence[dict[str, str]], add_generation_prompt: bool = True
    ) -> list[int]:
        """Tokens to append to `history` (which ends with the model's reply) for `messages`."""
        check_messages(messages)
        full = self._tokenizer.apply_chat_template(
            [*self._prior, *messages], add_generation_prompt=add_generation_prompt
        )
        if not full.startswith(self._base):
            raise ValueError(
                "the chat template renders earlier messages differently when more follow; send token_ids instead"
            )
        message = full[len(self._base) :]
        k = _generated_closing(history, self._closing)
        generated = self._tokenizer.decode(self._closing[:k], skip_special_tokens=False)
        if self._closing_text.startswith(generated):
            # One string with the message: no token boundary that the whole conversation lacks.
            return self._tokenizer.encode(self._closing_text[len(generated) :] + message)
        return self._closing[k:] + self._tokenizer.encode(message)


def _generated_closing(history: Sequence[int], closing: Sequence[int]) -> int:
    """How many leading tokens of `closing` the model already generated at the end of `history`."""
    for k in range(min(len(closing), len(history)), 0, -1):
        if list(history[-k:]) == list(closing[:k]):
            return k
    return 0


def check_messages(messages: Sequence[dict[str, str]]) -> None:
    for message in messages:
        if message["role"] not in ROLES:
            raise ValueError(f"role must be one of {', '.join(ROLES)}, got {message['role']!r}")
        if not message["content"]:
            raise ValueError("message is empty")
