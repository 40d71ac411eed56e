"""What a prefill loads from the store: the decision alone, over the prompt's blocks and the request.

`choose_loads` is pure: the prefill engine reads what it holds of the prompt (`PromptBlocks`), and
the decision of which store hits and which stored tail to load, and by which plan, follows from
that, the request and two facts of the engine (its block size, whether it streams loads layer by
layer). `PrefillWorker` then loads, computes and exports by it.
"""

from __future__ import annotations

from dataclasses import dataclass

from agentserve.contracts import LoadPlan, PrefillRequest


@dataclass(frozen=True)
class PromptBlocks:
    """What the prefill engine holds of a prompt: its full blocks' ids, how many leading ones are
    resident in its pool, and the id of the stored tail the request names (None: none)."""

    ids: list[bytes]
    resident: int
    tail: bytes | None = None


@dataclass(frozen=True)
class TurnLoads:
    """The blocks a prefill loads, in prompt order, and how.

    `hits`: the leading store hits the prefill counts as stored (its loads and its resident ones);
    `blocks`: the ids it loads (hits it does not hold, then the tail if it loads one); `tail`: that
    tail's id, `tail_tokens` its valid rows (0 without a tail); `plan`: the request's plan scaled to
    what actually loads (a SPLIT's share of `blocks`)."""

    hits: int
    blocks: list[bytes]
    tail: bytes | None
    tail_tokens: int
    plan: LoadPlan

    @property
    def stored(self) -> int:
        """Leading blocks of the prompt the computation starts from: the hits, and the tail."""
        return self.hits + (1 if self.tail is not None else 0)


def choose_loads(request: PrefillRequest, prompt: PromptBlocks, block_size: int, layerwise: bool) -> TurnLoads:
    """The loads of `request`'s prefill over `prompt`.

    A prefill computes at least the prompt's last token. A layerwise one streams whole blocks in
    front of what it computes, so a prompt of whole blocks that are all stored (a turn sent again,
    a shared prefix warmed twice) loads all but its last, which it recomputes; loaded into the pool
    (not layerwise), the engine's own prefix cache does. The tail extends the hits only where the
    engine would otherwise compute from them on: not past a block it holds whole, not beside shared
    blocks it reuses (`request.segments`)."""
    hits = request.store_hit_blocks
    if layerwise:
        hits = min(hits, (len(request.token_ids) - 1) // block_size)
    blocks = prompt.ids[prompt.resident : hits]
    extends = prompt.resident <= hits == request.store_hit_blocks and request.segments is None
    tail = prompt.tail if extends else None
    if tail is not None:
        blocks.append(tail)
    tail_tokens = request.store_tail_tokens if tail is not None else 0
    stored = hits + (1 if tail is not None else 0)
    return TurnLoads(hits, blocks, tail, tail_tokens, request.plan.scaled_to(len(blocks), stored))
