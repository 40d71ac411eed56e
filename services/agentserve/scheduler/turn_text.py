"""A turn's streamed text: detokenized deltas, ended at the first stop string.

Stop strings are matched on text, not tokens (a string may span tokens, and a token may hold more
than the string). The text before the match is sent, the match and anything after it are not,
and the turn ends with finish reason "stop". Until a match is ruled out, text that could be the
start of a stop string is held back, so a client never receives text that is taken back later.
Like vLLM, no stop string is matched before `min_tokens` output tokens: text sent before then is
final.
"""

from __future__ import annotations

from collections.abc import Sequence

from agentserve.model_files.tokenizer import Tokenizer
from agentserve.scheduler.detokenizer import IncrementalDetokenizer


class StopStrings:
    def __init__(self, stops: Sequence[str]) -> None:
        self._stops = tuple(stops)
        self._held = ""
        self.stopped = False

    def add(self, text: str, active: bool = True, final: bool = False) -> str:
        """The part of `text` (after what was held back) that is safe to send. Sets `stopped` when
        a stop string appears; `active` False sends everything (min_tokens not reached yet)."""
        text, self._held = self._held + text, ""
        if self.stopped or not self._stops or not active:
            return "" if self.stopped else text
        hits = [at for at in (text.find(s) for s in self._stops) if at >= 0]
        if hits:
            self.stopped = True
            return text[: min(hits)]
        if not final:
            keep = max(partial_prefix_length(text, s) for s in self._stops)
            text, self._held = text[: len(text) - keep], text[len(text) - keep :]
        return text


class TurnText:
    """The text deltas of a turn's output tokens, cut at the first of `stops`."""

    def __init__(self, tokenizer: Tokenizer, stops: Sequence[str] = (), min_tokens: int = 0) -> None:
        self._detokenizer = IncrementalDetokenizer(tokenizer)
        self._stops = StopStrings(stops)
        self._min_tokens = min_tokens
        self._tokens = 0

    @property
    def stopped(self) -> bool:
        return self._stops.stopped

    def add(self, token_ids: Sequence[int], final: bool = False) -> str:
        self._tokens += len(token_ids)
        delta = self._detokenizer.add(token_ids, final=final)
        return self._stops.add(delta, active=self._tokens > self._min_tokens, final=final)


def partial_prefix_length(text: str, marker: str) -> int:
    """Length of the longest suffix of `text` that is a proper prefix of `marker`: the tail a stream
    holds back while it may still grow into `marker` (a stop string, a tool-call tag)."""
    for n in range(min(len(marker) - 1, len(text)), 0, -1):
        if text.endswith(marker[:n]):
            return n
    return 0
