"""The engine's side of TokenDance: prefill a segmented prompt into a sequence's pool slots,
reusing shared blocks' masters kept across steps, so every prompt of a round (however the steps
batch them) reuses the masters the first one gave (`CollectiveReuse.prefill_round`).

Masters are kept for the newest `keep_rounds` rounds seen: an all-gather prompt holds its own
round's blocks (earlier rounds' sit in the private history), so older masters are dead weight.
"""

from __future__ import annotations

import torch

from agentserve.contracts.segments import SegmentedPrompt
from agentserve.engine.attention import token_rows
from agentserve.engine.kv_pool import KVPool
from agentserve.engine.model import CausalLM
from agentserve.engine.recompute_selection import DEFAULT_MAX_DEVIATION
from agentserve.engine.sequence import Sequence
from agentserve.engine.shared_context import CollectiveReuse, MasterKV

KEEP_ROUNDS = 2


class SegmentedPrefill:
    def __init__(self, model: CausalLM, pool: KVPool, max_deviation: float | None = DEFAULT_MAX_DEVIATION):
        self.reuse = CollectiveReuse(model, max_deviation)
        self.pool = pool
        self.masters: dict[str, MasterKV] = {}
        self.masters_computed = 0

    def prefill(self, seq: Sequence, prompt: SegmentedPrompt) -> torch.Tensor:
        """Write the prompt's KV into `seq.slots` and return its last token's logits `[vocab]`;
        sets `seq.reuse_stats`, and `seq.exact_kv` False when shared blocks were reused."""
        self._forget_old_rounds(prompt)
        result = self.reuse.prefill_round([prompt], self.masters)
        self.masters_computed += result.masters_computed
        prefill = result.prefills[0]
        rows = token_rows(torch.as_tensor(seq.slots, dtype=torch.long), 0, len(seq.token_ids), self.pool.block_size)
        for layer in range(self.pool.num_layers):
            k_rows, v_rows = self.pool.flat(layer)
            k_rows.index_copy_(0, rows, prefill.k[layer])
            v_rows.index_copy_(0, rows, prefill.v[layer])
        seq.reuse_stats = prefill.stats
        seq.exact_kv = prefill.stats.exact
        return prefill.logits[-1]

    def _forget_old_rounds(self, prompt: SegmentedPrompt) -> None:
        rounds = [span.block.round_index for span in prompt.shared_spans()]
        if not rounds:
            return
        oldest = max(rounds) - KEEP_ROUNDS + 1
        for content_id in [c for c, m in self.masters.items() if m.block.round_index < oldest]:
            del self.masters[content_id]
