"""IncrementalDetokenizer: the text delta each new batch of output tokens adds.

Decoding token by token is wrong for byte-level BPE (one character can span tokens) and for
decoders that merge pieces, so the whole output is decoded each time and the new suffix emitted.
A trailing U+FFFD means a character's bytes are still incomplete: it is held back until the next
tokens complete it, or emitted as is when the output ends.
"""

from __future__ import annotations

from collections.abc import Sequence

from agentserve.model_files.tokenizer import Tokenizer

REPLACEMENT = "\ufffd"


class IncrementalDetokenizer:
    def __init__(self, tokenizer: Tokenizer) -> None:
        self._tokenizer = tokenizer
        self._tokens: list[int] = []
        self._emitted = 0  # characters already returned

    def add(self, token_ids: Sequence[int], final: bool = False) -> str:
        """Append `token_ids` to the output; return the text not returned before."""
        self._tokens.extend(token_ids)
        text = self._tokenizer.decode(self._tokens)
        if not final:
            text = text.rstrip(REPLACEMENT)
        # Byte-level BPE decodes prefix-stably, so earlier text is never rewritten: what the client
        # has is text[:emitted] and the rest is new.
        delta = text[self._emitted :]
        self._emitted += len(delta)
        return delta
