"""Turn segments into a segmented prompt: where a turn's shared blocks sit in its tokens.

The client names the shared blocks its turn appends (`TurnSegments`); the scheduler renders the
turn as always (chat template or raw tokens) and then finds each block's tokens among the new
tokens. A block given as text is tokenized on its own, so it is found only when tokenizing it
in context gives the same tokens: true when it starts and ends at a line boundary of the message.
Everything else in the prompt, the session's history included, becomes private runs.
"""

from __future__ import annotations

from array import array
from collections.abc import Callable, Sequence

from agentserve.contracts.segments import PrivateSegment, Segment, SegmentedPrompt, SharedBlock
from agentserve.contracts.turn_segments import TurnSegments

_ITEM = array("I").itemsize


def segment_prompt(
    prompt: Sequence[int], new_start: int, turn: TurnSegments, encode: Callable[[str], list[int]]
) -> SegmentedPrompt:
    """`prompt` (history + this turn's tokens from `new_start`) as segments. ValueError naming the
    block when one is not among the new tokens or two overlap there."""
    haystack = array("I", prompt[new_start:]).tobytes()
    spans: list[tuple[int, int, SharedBlock]] = []
    for ref in turn.shared:
        tokens = list(ref.token_ids) if ref.token_ids else encode(ref.text)
        where = f"shared block {ref.content_id!r}"
        if not tokens:
            raise ValueError(f"{where}: its text has no tokens")
        start = _find(haystack, tokens)
        if start < 0:
            hint = " (a text block must start and end at a line boundary)" if ref.text else ""
            raise ValueError(f"{where}: its tokens do not occur in the turn's new tokens{hint}")
        block = SharedBlock(ref.content_id, turn.round_index, tuple(tokens))
        spans.append((new_start + start, new_start + start + len(tokens), block))
    spans.sort(key=lambda span: span[0])
    for (_, end, first), (start, _, second) in zip(spans, spans[1:], strict=False):
        if start < end:
            raise ValueError(
                f"shared blocks {first.content_id!r} and {second.content_id!r} overlap in the turn's tokens"
            )
    segments: list[Segment] = []
    at = 0
    for start, end, block in spans:
        if start > at:
            segments.append(PrivateSegment(tuple(prompt[at:start])))
        segments.append(block)
        at = end
    if at < len(prompt):
        segments.append(PrivateSegment(tuple(prompt[at:])))
    return SegmentedPrompt(tuple(segments), turn.reuse)


def _find(haystack: bytes, tokens: Sequence[int]) -> int:
    """Token index of the first occurrence of `tokens` in `haystack` (uint32 tokens), or -1.
    A byte match off the token grid is skipped."""
    needle = array("I", tokens).tobytes()
    at = haystack.find(needle)
    while at >= 0 and at % _ITEM:
        at = haystack.find(needle, at + 1)
    return at // _ITEM if at >= 0 else -1
