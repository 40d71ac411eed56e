"""StopScanner: where a turn's output ends, for the first token and the decode stream alike.

The engines know only EOS: a caller's stop ids end the turn here, at the first one past
`min_tokens` (the tokens after it are dropped), and so does a stop string (`TurnText`, which cuts
the text), or the engine's own end of the request.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from agentserve.contracts import SamplingParams
from agentserve.model_files.tokenizer import Tokenizer
from agentserve.scheduler.turn_text import TurnText


@dataclass(frozen=True)
class Scanned:
    """Output tokens as the turn keeps them (up to a stop id), their text delta, and the finish
    reason if the turn ends with them (None while it goes on)."""

    tokens: list[int]
    text: str
    reason: str | None = None


class StopScanner:
    def __init__(self, tokenizer: Tokenizer, sampling: SamplingParams) -> None:
        self._text = TurnText(tokenizer, sampling.stop, sampling.min_tokens)
        self._stop_ids = frozenset(sampling.stop_token_ids)
        self._min_tokens = sampling.min_tokens
        self._seen = 0  # output tokens scanned so far

    def scan(self, tokens: Sequence[int], finished: bool, finish_reason: str | None = None) -> Scanned:
        """The next output tokens; `finished`: the engine ended the request with them, for
        `finish_reason` ("length" if it gave none)."""
        stop_at = self._stop_id_at(tokens)
        kept = list(tokens if stop_at is None else tokens[: stop_at + 1])
        self._seen += len(kept)
        done = finished or stop_at is not None
        delta = self._text.add(kept, final=done)
        if not (done or self._text.stopped):
            return Scanned(kept, delta)
        reason = "stop" if stop_at is not None or self._text.stopped else finish_reason or "length"
        return Scanned(kept, delta, reason)

    def _stop_id_at(self, tokens: Sequence[int]) -> int | None:
        """Index in `tokens` of the first caller stop id past min_tokens."""
        for i, token in enumerate(tokens):
            if token in self._stop_ids and self._seen + i + 1 > self._min_tokens:
                return i
        return None
