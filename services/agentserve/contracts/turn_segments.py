"""What a client says of one turn's shared context (TokenDance, docs/tokendance.md).

In an all-gather round every agent's turn appends the same gathered blocks (the other agents'
outputs) to its own history. The client names each such block by a content id and says which
round the turn belongs to; the scheduler finds the blocks in the turn's new tokens and hands the
engine a `SegmentedPrompt` (everything else, the history included, is private). Blocks are given
by their tokens, or by their text, which the scheduler tokenizes on its own.
"""

from __future__ import annotations

from dataclasses import dataclass

from agentserve.contracts.segments import ReusePolicy

MAX_CONTENT_ID_LENGTH = 128
MAX_SHARED_BLOCKS = 256  # an all-gather over more agents than this is a job to split


@dataclass(frozen=True)
class SharedRef:
    """A shared block the turn's new tokens hold: exactly one of `token_ids` and `text`."""

    content_id: str
    token_ids: tuple[int, ...] = ()
    text: str = ""


@dataclass(frozen=True)
class TurnSegments:
    """A turn's shared blocks, its round and the reuse it allows. ValueErrors start with the
    offending field's path (`shared[2].content_id ...`): fronts prefix their own field name."""

    round_index: int
    shared: tuple[SharedRef, ...]
    reuse: ReusePolicy = ReusePolicy()

    def __post_init__(self) -> None:
        object.__setattr__(self, "shared", tuple(self.shared))
        if isinstance(self.round_index, bool) or not isinstance(self.round_index, int) or self.round_index < 0:
            raise ValueError(f"round must be a non-negative integer, got {self.round_index!r}")
        if not self.shared:
            raise ValueError("shared must name at least one shared block")
        if len(self.shared) > MAX_SHARED_BLOCKS:
            raise ValueError(f"shared holds at most {MAX_SHARED_BLOCKS} blocks, got {len(self.shared)}")
        seen: set[str] = set()
        for i, ref in enumerate(self.shared):
            where = f"shared[{i}]"
            cid = ref.content_id
            if not cid or len(cid) > MAX_CONTENT_ID_LENGTH or not cid.isprintable():
                raise ValueError(
                    f"{where}.content_id must be 1-{MAX_CONTENT_ID_LENGTH} printable characters, got {cid!r}"
                )
            if cid in seen:
                raise ValueError(f"{where}.content_id {cid!r} appears twice in one turn")
            seen.add(cid)
            if bool(ref.token_ids) == bool(ref.text):
                raise ValueError(f"{where} ({cid!r}) needs exactly one of token_ids and text")
            if any(isinstance(t, bool) or not isinstance(t, int) or not 0 <= t < 2**32 for t in ref.token_ids):
                raise ValueError(f"{where}.token_ids must be token ids (non-negative 32-bit integers)")
