"""A prompt's reused KV as the KV store holds it (TokenDance): the handle a decode engine, or the
session's next turn, reads the prompt's KV back with (`engine/reused_context.py` writes and
assembles it; the wire form is `ContextLayout` in common.proto).

Reused KV is not a full recompute's, so it is never stored under the chained prefix ids (those
promise exact KV): its blocks have ids of their own, and whoever reads it back must be told which.
`tokens_digest` ties a layout to the tokens it holds the KV of, so a layout offered with a prompt
that does not start with them is not restored.
"""

from __future__ import annotations

import hashlib
import struct
from collections.abc import Sequence
from dataclasses import dataclass

_PERSON = b"agentserve.ctxtk"


def tokens_digest(token_ids: Sequence[int]) -> bytes:
    """16 bytes naming a token sequence (its ids, in order)."""
    digest = hashlib.blake2b(digest_size=16, person=_PERSON)
    digest.update(struct.pack(f"<{len(token_ids)}I", *token_ids))
    return digest.digest()


@dataclass(frozen=True)
class Piece:
    """Prompt rows [start, end) stored as block `block_id`: a full block, or a diff against
    `master_id`."""

    start: int
    end: int
    block_id: bytes
    master_id: bytes | None = None


@dataclass(frozen=True)
class ContextLayout:
    """The KV of a prompt's first `num_tokens` tokens, as `pieces` in prompt order (contiguous from
    row 0); `tokens_digest` of those tokens (empty: not recorded)."""

    num_tokens: int
    pieces: tuple[Piece, ...]
    tokens_digest: bytes = b""

    @property
    def block_ids(self) -> list[bytes]:
        return [piece.block_id for piece in self.pieces]

    @property
    def master_ids(self) -> list[bytes]:
        """The masters the diffs are read against, each once, in first-use order."""
        return list(dict.fromkeys(p.master_id for p in self.pieces if p.master_id is not None))

    @property
    def diff_ids(self) -> list[bytes]:
        return [p.block_id for p in self.pieces if p.master_id is not None]

    def holds(self, token_ids: Sequence[int]) -> bool:
        """Whether these are the KV of `token_ids`' first `num_tokens` tokens (by the digest)."""
        return (
            bool(self.tokens_digest)
            and len(token_ids) >= self.num_tokens
            and tokens_digest(token_ids[: self.num_tokens]) == self.tokens_digest
        )
