"""Reused KV (TokenDance) between a served turn's engines and the KV store.

A prefill that reused shared blocks (`Sequence.reused`) persists the prompt's KV as its round's
masters, once each, plus the prompt's pieces: a diff against its master per shared block, full
blocks for its private rows (`engine/reused_context.py`), and returns the layout. Reused KV is
not a full recompute's, so it never enters the chained prefix ids: the layout is the only way to
it. The decode engine restores the prompt from the layout and decodes over it; the session's next
reused turn restores its history from it and computes only what follows.

Restoring reads the masters and the pieces from the store and applies each diff as a receiver
does, layer chunk by layer chunk (`ContextBlocks.assemble`). Whatever the store cannot give back
whole (a master or a piece missing, a corrupt block dropped by the store, a diff that does not
restore) is `None`: the caller recomputes, it never decodes over KV it could not restore.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

import torch

from agentserve.contracts.context import ContextLayout
from agentserve.contracts.segments import SegmentedPrompt
from agentserve.engine.engine import LLMEngine
from agentserve.engine.reused_context import ContextBlocks, MissingBlockError
from agentserve.engine.rope import inverse_frequencies
from agentserve.engine.segmented_prefill import Reused
from agentserve.engine_service.kv_moves import KVMover
from agentserve.kv.rope_shift import RopeShift

log = logging.getLogger(__name__)


def context_blocks(engine: LLMEngine, tenant: str) -> ContextBlocks:
    """The store blocks of `tenant`'s reused KV on this engine's model (ids hash the tenant)."""
    return ContextBlocks(engine.fingerprint, RopeShift(inverse_frequencies(engine.model_config)), namespace=tenant)


@dataclass(frozen=True)
class Persisted:
    layout: ContextLayout
    masters: int  # master blocks this call stored (a round's masters are stored once)
    diffs: int  # diff blocks among the prompt's pieces
    stored: int  # blocks the store took (0 with the store down)


class StoredMasters:
    """The master blocks this engine has stored, by block id, so a round's masters are written
    once however many of its prompts reuse them; the newest `keep` are remembered (one forgotten
    is only written again: a put of a block the store holds changes nothing)."""

    def __init__(self, keep: int = 4096) -> None:
        self.keep = keep
        self.ids: dict[bytes, None] = {}

    def new(self, blocks: list[tuple[bytes, bytes]]) -> list[tuple[bytes, bytes]]:
        fresh = [(block_id, data) for block_id, data in blocks if block_id not in self.ids]
        for block_id, _ in fresh:
            self.ids[block_id] = None
        while len(self.ids) > self.keep:
            del self.ids[next(iter(self.ids))]
        return fresh


async def persist(
    mover: KVMover,
    blocks: ContextBlocks,
    prompt: SegmentedPrompt,
    reused: Reused,
    prefix: ContextLayout | None,
    stored_masters: StoredMasters,
) -> Persisted:
    """Store the prompt's reused KV (its masters first, those not stored yet) and return its
    layout; `prefix`: the layout its first `reused.prefix_tokens` were restored from."""
    if reused.prefix_tokens and (prefix is None or prefix.num_tokens != reused.prefix_tokens):
        raise ValueError(f"the prefill restored {reused.prefix_tokens} tokens, not the prefix layout's")
    persisted = blocks.prompt(prompt, reused.prefill, reused.masters, prefix if reused.prefix_tokens else None)
    masters = stored_masters.new(blocks.masters(reused.masters.values()))
    stored = await mover.put(masters + persisted.blocks)
    diff_ids = set(persisted.layout.diff_ids)
    new_diffs = sum(1 for block_id, _ in persisted.blocks if block_id in diff_ids)
    return Persisted(persisted.layout, len(masters), new_diffs, stored)


async def restore(
    mover: KVMover, blocks: ContextBlocks, layout: ContextLayout, dtype: torch.dtype
) -> tuple[torch.Tensor, torch.Tensor] | str:
    """The KV `[layers, num_tokens, kv_heads, head_dim]` of the layout's tokens, read back from the
    store bit for bit; else why not ("missing", "corrupt"), for the caller to recompute."""
    found = await mover.fetch(layout.master_ids + layout.block_ids)
    try:
        k, v = blocks.assemble(layout, lambda ids: [found.get(block_id) for block_id in ids])
    except MissingBlockError as exc:
        log.info("reused context not restored (%s): recomputing", exc)
        return "missing"
    except ValueError as exc:  # CorruptBlockError included: a diff or master that does not restore
        log.warning("reused context not restored (%r): recomputing", exc)
        return "corrupt"
    if k.shape[1] != layout.num_tokens or k.dtype != dtype:
        return "corrupt"
    return k, v
