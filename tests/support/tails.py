"""What a later turn finds cached of its session's history with tail blocks (the scheduler's default)."""

from __future__ import annotations


def cached_history(tokens: int, block_size: int = 16) -> int:
    """Tokens of a history of `tokens` cached for the next turn: its full blocks and its stored tail,
    so all but the last token sampled, whose KV the decode engine computed only if it completed a
    block (`scheduler/tail_blocks.py`)."""
    return tokens - 1 if tokens % block_size else tokens
