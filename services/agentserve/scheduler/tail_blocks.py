"""Tail blocks: a session's context past its last full block, stored so its next turn computes
only its new tokens.

The store keeps whole blocks; without tails every later turn recomputes its context's partial last
block (~half a block) beside its new tokens. With `tail_blocks` on, the decode engine that ends a
turn persists that block too, under its tail id (`kv.block_hash.tail_block_id`: the parent's id and
the block's tokens, their count hashed in, so it never names a full block), and the next turn
looks it up with one more id and loads it behind its full hits (SGLang's radix cache reuses KV by
the token; LMCache's `save_unfull_chunk` stores the partial chunk).

Which tokens a tail holds follows from the context alone: the decode engine has the KV of every
context token but the last one it sampled, unless that token completed a block (the engine then
computes it too, `LLMEngine._finish`); so a context of L tokens, L not a multiple of the block
size, has a tail of the tokens [block_size * f, L - 1) with f = (L - 1) // block_size, when that
is not empty. A tail that is absent (a turn cut short, the store down) only costs its compute.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from agentserve.kv.block_hash import tail_block_id


@dataclass(frozen=True)
class Tail:
    block_id: bytes
    full_blocks: int  # the context's full blocks before it
    tokens: int  # context tokens it holds after them


def context_tail(
    prompt: Sequence[int],
    context_len: int,
    full_ids: Sequence[bytes],
    block_size: int,
    fingerprint: str,
    tenant: str,
) -> Tail | None:
    """The tail the previous turn stored of the first `context_len` tokens of `prompt` (the
    session's history), given `full_ids`, the chained ids of the prompt's full blocks; None when
    such a context has none, or no prompt token would follow it."""
    if not context_len or not context_len % block_size:
        return None  # no context, or one that ends on a block boundary: every block of it is full
    computed = context_len - 1
    full, tokens = divmod(computed, block_size)
    if not tokens or computed >= len(prompt) or len(full_ids) < full:
        return None
    parent = full_ids[full - 1] if full else None
    block_id = tail_block_id(parent, fingerprint, tenant, prompt[full * block_size : computed], block_size)
    return Tail(block_id, full, tokens)
