"""Synthetic token ids for traces that carry lengths and hash ids but no text.

Every piece of content is a deterministic function of a key: a Mooncake hash id, a turn's content
key, a shared prefix's id. So two prompts are identical exactly where their keys are, and the
chained block hashes of the serving system see exactly the trace's prefix reuse. Ids are drawn
uniformly from the model's ordinary tokens (`[low, high)`), so distinct keys share no block.
"""

from __future__ import annotations

import hashlib
from functools import lru_cache

import numpy as np

# The embedded model: 8192 ids, the first five are specials.
DEFAULT_LOW, DEFAULT_HIGH = 5, 8192


class TokenSynth:
    def __init__(self, low: int = DEFAULT_LOW, high: int = DEFAULT_HIGH) -> None:
        if not 0 <= low < high:
            raise ValueError(f"token id range must be 0 <= low < high, got [{low}, {high})")
        self.low, self.high = low, high
        self._block = lru_cache(maxsize=1 << 16)(self._draw)

    def _draw(self, key: str, n: int) -> tuple[int, ...]:
        seed = int.from_bytes(hashlib.blake2b(key.encode(), digest_size=8).digest(), "little")
        return tuple(np.random.default_rng(seed).integers(self.low, self.high, size=n).tolist())

    def content(self, key: str, n: int) -> list[int]:
        """`n` tokens of the content named `key`; a shorter length is a prefix of a longer one."""
        if n <= 0:
            return []
        # Drawn in 4096-token pieces so a prefix of a long content costs no more than its length.
        out: list[int] = []
        piece = 0
        while len(out) < n:
            out.extend(self._block(f"{key}/{piece}", 4096))
            piece += 1
        return out[:n]

    def hash_block(self, hash_id: int, block_tokens: int) -> tuple[int, ...]:
        return self._block(f"hash:{hash_id}", block_tokens)

    def hashed_prompt(self, hash_ids: tuple[int, ...] | list[int], input_tokens: int, block_tokens: int) -> list[int]:
        """The prompt of a hash-based request: block i is hash id i's content, cut at `input_tokens`."""
        if input_tokens > len(hash_ids) * block_tokens:
            raise ValueError(
                f"{input_tokens} tokens need at least {-(-input_tokens // block_tokens)} hash ids "
                f"of {block_tokens} tokens, got {len(hash_ids)}"
            )
        out: list[int] = []
        for h in hash_ids:
            if len(out) >= input_tokens:
                break
            out.extend(self.hash_block(h, block_tokens))
        return out[:input_tokens]

    def prefix(self, prefix_id: str, n: int) -> list[int]:
        return self.content(f"prefix:{prefix_id}", n)

    def message(self, key: str, n: int) -> list[int]:
        return self.content(f"msg:{key}", n)
