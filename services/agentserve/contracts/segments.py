"""A prompt as segments (TokenDance, issue 16): private token runs and shared blocks, plus how the
engine may reuse a shared block's KV.

In an all-gather round every agent's prompt holds the same shared blocks (the agents' gathered
outputs), each after the agent's own private history and often in another order. A shared block
is named by a content id chosen by the client; the engine computes its KV once (the block's
*master*, at a canonical position) and reuses it wherever a prompt holds the block: keys
re-rotated to the new positions, plus a recomputed fraction of its tokens to repair the
attention to the private history before it. What one prompt ends up holding for a block is a
`Sibling`: the master, shifted, with some rows recomputed; storage keeps it as a diff.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass

# The share of each shared block's tokens the engine recomputes in REUSE mode unless a request
# says otherwise. Chosen from measurements on the trained default model (docs/tokendance.md,
# "Choosing the default recompute fraction"): the largest hundredth at which both all-gather
# workloads store >= 11x less as master + diffs, in the store's accounting and on disk
# (GenerativeAgents 12.94 / 12.03, AgentSociety 14.58 / 13.12; at 0.08 GenerativeAgents is 11.48
# but 10.95 on disk, at 0.09 10.87); top-1 agreement with full recompute there 0.973 (mean KL
# 0.0063 nats) on the bench's prompt set, the same as at 0.08 (0.976 at 0.15, where storage is 7.7).
DEFAULT_RECOMPUTE_FRACTION = 0.07


def _check_token_ids(what: str, token_ids: tuple[int, ...]) -> None:
    if not token_ids:
        raise ValueError(f"{what}: token_ids must not be empty")
    for t in token_ids:
        if not isinstance(t, int) or isinstance(t, bool) or t < 0:
            raise ValueError(f"{what}: token_ids must be non-negative integers, got {t!r}")


@dataclass(frozen=True)
class PrivateSegment:
    """Tokens only this prompt holds (an agent's own history, instructions, its turn's question)."""

    token_ids: tuple[int, ...]

    def __post_init__(self) -> None:
        object.__setattr__(self, "token_ids", tuple(self.token_ids))
        _check_token_ids("private segment", self.token_ids)


@dataclass(frozen=True)
class SharedBlock:
    """Tokens many prompts hold, named by `content_id`: the same id must always carry the same
    tokens. `round_index` is the all-gather round the block belongs to (0 for the first)."""

    content_id: str
    round_index: int
    token_ids: tuple[int, ...]

    def __post_init__(self) -> None:
        object.__setattr__(self, "token_ids", tuple(self.token_ids))
        if not self.content_id:
            raise ValueError("shared block: content_id must not be empty")
        if not isinstance(self.round_index, int) or isinstance(self.round_index, bool) or self.round_index < 0:
            raise ValueError(f"shared block {self.content_id!r}: round_index must be >= 0, got {self.round_index!r}")
        _check_token_ids(f"shared block {self.content_id!r}", self.token_ids)


Segment = PrivateSegment | SharedBlock


class ReuseMode(enum.Enum):
    EXACT = "exact"  # recompute every token: output identical to a prompt with no segments
    REUSE = "reuse"  # reuse shared blocks' masters, recomputing `recompute_fraction` of each


@dataclass(frozen=True)
class ReusePolicy:
    """How a request lets the engine reuse its shared blocks. `recompute_fraction` (REUSE only) is
    the share of each block's tokens recomputed in place: 0 reuses the master as shifted, 1
    recomputes every token (same output as EXACT, at the cost of computing the master too).
    The engine may still serve a REUSE request exactly when it estimates the reuse would deviate
    too far from a full recompute (its own threshold)."""

    mode: ReuseMode = ReuseMode.REUSE
    recompute_fraction: float = DEFAULT_RECOMPUTE_FRACTION

    def __post_init__(self) -> None:
        if not isinstance(self.mode, ReuseMode):
            raise ValueError(f"reuse mode must be one of {[m.value for m in ReuseMode]}, got {self.mode!r}")
        fraction = self.recompute_fraction
        if isinstance(fraction, bool) or not isinstance(fraction, int | float) or not 0.0 <= fraction <= 1.0:
            raise ValueError(f"recompute_fraction must be in [0, 1], got {fraction!r}")

    @property
    def exact(self) -> bool:
        return self.mode is ReuseMode.EXACT


EXACT = ReusePolicy(ReuseMode.EXACT)


@dataclass(frozen=True)
class SharedSpan:
    """Where a prompt holds a shared block: its tokens are the prompt's [start, start + len)."""

    start: int
    block: SharedBlock

    @property
    def end(self) -> int:
        return self.start + len(self.block.token_ids)


@dataclass(frozen=True)
class SegmentedPrompt:
    """A prompt as its segments in order, and the reuse it allows. A prompt holds a content id at
    most once (a repeat would be the same tokens twice: mark it private)."""

    segments: tuple[Segment, ...]
    reuse: ReusePolicy = ReusePolicy()

    def __post_init__(self) -> None:
        object.__setattr__(self, "segments", tuple(self.segments))
        if not self.segments:
            raise ValueError("a segmented prompt needs at least one segment")
        seen: set[str] = set()
        for segment in self.segments:
            if not isinstance(segment, PrivateSegment | SharedBlock):
                raise ValueError(f"segments must be PrivateSegment or SharedBlock, got {type(segment).__name__}")
            if isinstance(segment, SharedBlock):
                if segment.content_id in seen:
                    raise ValueError(f"shared block {segment.content_id!r} appears twice in one prompt")
                seen.add(segment.content_id)

    @property
    def token_ids(self) -> list[int]:
        return [t for segment in self.segments for t in segment.token_ids]

    def shared_spans(self) -> list[SharedSpan]:
        spans, start = [], 0
        for segment in self.segments:
            if isinstance(segment, SharedBlock):
                spans.append(SharedSpan(start, segment))
            start += len(segment.token_ids)
        return spans


@dataclass(frozen=True)
class Sibling:
    """One prompt's KV of a shared block, described against the block's master: the master's rows
    with keys re-rotated by `position_offset` (the sibling's start minus the master's), except the
    block-relative `recomputed_rows`, which were computed in place. Storage keeps exactly those
    rows as the block-sparse diff; the rest is the master's."""

    master_id: str  # the shared block's content id
    position_offset: int
    num_tokens: int
    recomputed_rows: tuple[int, ...] = ()

    def __post_init__(self) -> None:
        object.__setattr__(self, "recomputed_rows", tuple(self.recomputed_rows))
        if not self.master_id:
            raise ValueError("sibling: master_id must not be empty")
        if self.num_tokens <= 0:
            raise ValueError(f"sibling {self.master_id!r}: num_tokens must be positive, got {self.num_tokens}")
        rows = self.recomputed_rows
        if any(not 0 <= r < self.num_tokens for r in rows):
            raise ValueError(f"sibling {self.master_id!r}: recomputed_rows must lie in [0, {self.num_tokens})")
        if any(a >= b for a, b in zip(rows, rows[1:], strict=False)):
            raise ValueError(f"sibling {self.master_id!r}: recomputed_rows must be strictly increasing")

    @property
    def recomputed_fraction(self) -> float:
        return len(self.recomputed_rows) / self.num_tokens
