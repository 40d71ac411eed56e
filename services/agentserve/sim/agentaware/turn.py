"""One turn of an agent-aware job as the simulator carries it, and the block ids of a context."""

from __future__ import annotations

from dataclasses import dataclass, field


def context_block_ids(session_id: str, prefix_tokens: int, tokens: int, block_size: int) -> list[bytes]:
    """The ids of the full blocks of a session's first `tokens` context tokens. A block wholly
    inside the shared prefix (the agents' system prompt) has the prefix's id, so sessions share it;
    every later block is the session's own. Chained as the engine's ids are: a session's block i
    is only a hit after its blocks 0..i-1."""
    ids = []
    for i in range(tokens // block_size):
        if (i + 1) * block_size <= prefix_tokens:
            ids.append(f"prefix:{i}".encode())
        else:
            ids.append(f"{session_id}:{i}".encode())
    return ids


@dataclass
class AwareTurn:
    session_id: str
    index: int
    critical: bool
    prior_tokens: int  # the context before this turn's new tokens (what it may reuse)
    prompt_tokens: int
    output_tokens: int
    submitted_s: float
    block_ids: list[bytes]  # full blocks of prompt and output
    returning: bool = False  # the session's previous turn called a tool
    kv_left: bool = False  # its KV left the engine during the tool wait (dropped or evicted)
    engine: str = ""
    slots: list[int] = field(default_factory=list)
    hit_blocks: int = 0  # resident at admission
    loaded_blocks: int = 0  # read from the store
    compute_left: int = 0  # prompt tokens still to compute
    computed_tokens: int = 0
    emitted: int = 0
    first_token_s: float | None = None
    last_token_s: float | None = None
    done_s: float | None = None  # last token out (the tool wait follows)

    @property
    def total_tokens(self) -> int:
        return self.prompt_tokens + self.output_tokens
