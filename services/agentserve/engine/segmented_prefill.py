"""The engine's side of TokenDance: prefill a segmented prompt into a sequence's pool slots,
reusing shared blocks' masters kept across steps, so every prompt of a round (however the steps
batch them) reuses the masters the first one gave (`CollectiveReuse.prefill_round`).

Masters are kept for the newest `keep_rounds` rounds seen: an all-gather prompt holds its own
round's blocks (earlier rounds' sit in the private history), so older masters are dead weight.

A prompt may come with its first tokens' KV restored from the store (`PrefixKV`: the session's
previous reused turn, read back from masters + diffs); only the tokens after it run. What the
prefill computed, and the masters its blocks were reused against, stay on the sequence
(`Sequence.reused`) for the caller to persist as masters + diffs (`reused_context`).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from agentserve.contracts.segments import SegmentedPrompt
from agentserve.engine.attention import token_rows
from agentserve.engine.kv_pool import KVPool
from agentserve.engine.model import CausalLM
from agentserve.engine.recompute_selection import DEFAULT_MAX_DEVIATION
from agentserve.engine.sequence import Sequence
from agentserve.engine.shared_context import CollectiveReuse, MasterKV, PrefixKV, ReusedPrefill

KEEP_ROUNDS = 2


@dataclass(frozen=True)
class Reused:
    """A segmented prompt's prefill as the store will keep it: its KV and siblings (`prefill`),
    the masters of the blocks it holds (by content id), and how many leading tokens came
    restored (`prefix_tokens`, 0 for none)."""

    prefill: ReusedPrefill
    masters: dict[str, MasterKV]
    prefix_tokens: int = 0


class SegmentedPrefill:
    def __init__(self, model: CausalLM, pool: KVPool, max_deviation: float | None = DEFAULT_MAX_DEVIATION):
        self.reuse = CollectiveReuse(model, max_deviation)
        self.pool = pool
        self.masters: dict[str, MasterKV] = {}
        self.masters_computed = 0

    def prefill(self, seq: Sequence, prompt: SegmentedPrompt, prefix: PrefixKV | None = None) -> torch.Tensor:
        """Write the prompt's KV into `seq.slots` and return its last token's logits `[vocab]`;
        sets `seq.reuse_stats` and `seq.reused`, and `seq.exact_kv` False when shared blocks were
        reused or the prefix was restored (reused KV, not a full recompute's)."""
        self._forget_old_rounds(prompt)
        result = self.reuse.prefill_round([prompt], self.masters, prefixes=[prefix])
        self.masters_computed += result.masters_computed
        prefill = result.prefills[0]
        rows = token_rows(torch.as_tensor(seq.slots, dtype=torch.long), 0, len(seq.token_ids), self.pool.block_size)
        for layer in range(self.pool.num_layers):
            k_rows, v_rows = self.pool.flat(layer)
            k_rows.index_copy_(0, rows, prefill.k[layer])
            v_rows.index_copy_(0, rows, prefill.v[layer])
        held = {span.block.content_id for span in prompt.shared_spans()}
        masters = {content_id: master for content_id, master in self.masters.items() if content_id in held}
        seq.reuse_stats = prefill.stats
        seq.reused = Reused(prefill, masters, 0 if prefix is None else prefix.num_tokens)
        seq.exact_kv = prefill.stats.exact and prefix is None
        return prefill.logits[-1]

    def _forget_old_rounds(self, prompt: SegmentedPrompt) -> None:
        rounds = [span.block.round_index for span in prompt.shared_spans()]
        if not rounds:
            return
        oldest = max(rounds) - KEEP_ROUNDS + 1
        for content_id in [c for c, m in self.masters.items() if m.block.round_index < oldest]:
            del self.masters[content_id]
