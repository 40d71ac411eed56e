"""How many prompt tokens a trace says are reusable, and how many a prefix cache can then serve.

Hash ids are chained (equal id = equal block and equal prefix before it), so a request's reusable
prefix is its leading blocks already seen in earlier prompts, where an earlier prompt that ended
inside a block covers only its part of that block.
"""

from __future__ import annotations

from collections.abc import Sequence


class HashReuse:
    """Tokens covered so far, per hash id (an infinite cache of every prompt observed)."""

    def __init__(self) -> None:
        self._covered: dict[int, int] = {}

    def reusable(self, hash_ids: Sequence[int], input_tokens: int, block_tokens: int) -> int:
        """Leading tokens of this prompt that earlier observed prompts contain."""
        total = 0
        for k, h in enumerate(hash_ids):
            length = min(block_tokens, input_tokens - k * block_tokens)
            if length <= 0:
                break
            covered = min(self._covered.get(h, 0), length)
            total += covered
            if covered < length:
                break
        return total

    def observe(self, hash_ids: Sequence[int], input_tokens: int, block_tokens: int) -> None:
        for k, h in enumerate(hash_ids):
            length = min(block_tokens, input_tokens - k * block_tokens)
            if length <= 0:
                break
            if self._covered.get(h, 0) < length:
                self._covered[h] = length


def servable(reusable_tokens: int, prompt_tokens: int, kv_block_tokens: int = 16) -> int:
    """What a prefix cache of `kv_block_tokens`-token blocks serves of a reusable prefix: whole
    blocks only, and never the last prompt token (its logits must be computed)."""
    if prompt_tokens <= 0:
        return 0
    return min(reusable_tokens, prompt_tokens - 1) // kv_block_tokens * kv_block_tokens


def trace_reuse(prompts: Sequence[tuple[Sequence[int], int]], block_tokens: int) -> list[int]:
    """Reusable tokens of each (hash_ids, input_tokens) prompt given all earlier ones, in order."""
    reuse = HashReuse()
    out = []
    for hash_ids, input_tokens in prompts:
        out.append(reuse.reusable(hash_ids, input_tokens, block_tokens))
        reuse.observe(hash_ids, input_tokens, block_tokens)
    return out
