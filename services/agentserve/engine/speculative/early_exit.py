"""Self-speculative drafting: the target's first layers and its head are the draft model.

A smaller model with the target's tokenizer is the draft speculative decoding asks for; the
target's own leading `layers` layers, followed by its final norm and LM head, are one that needs
no other weights and shares the tokenizer by construction. Its KV is the target's KV of those
layers: for every token already verified, the target computed exactly what the draft would, so
the draft reads the target's pool and keeps no cache of its own. It writes its drafted positions'
KV of those layers into the slots reserved for them; the verify forward rewrites every layer of
them, and a rejected position's rows lie past the sequence's tokens.
"""

from __future__ import annotations

from collections.abc import Sequence as Seq

import torch

from agentserve.engine.attention import DecodeMetadata
from agentserve.engine.kv_pool import KVPool
from agentserve.engine.model import CausalLM
from agentserve.engine.sampling import distribution
from agentserve.engine.sequence import Sequence
from agentserve.engine.speculative.drafters import Draft


class EarlyExitDrafter:
    def __init__(self, model: CausalLM, pool: KVPool, layers: int, batch_invariant: bool = True) -> None:
        """`layers`: how many leading layers the draft runs, in [1, the target's layers); 0 picks half."""
        total = model.config.num_hidden_layers
        layers = layers or max(1, total // 2)
        if not 1 <= layers < total:
            raise ValueError(f"speculative draft_layers must be in [1, {total}) for this model, got {layers}")
        self.model = model
        self.pool = pool
        self.layers = layers
        self.batch_invariant = batch_invariant

    def propose(self, seqs: Seq[Sequence], budgets: Seq[int]) -> list[Draft]:
        drafts: list[list[int]] = [[] for _ in seqs]
        probs: list[list[torch.Tensor]] = [[] for _ in seqs]
        for j in range(max(budgets, default=0)):
            rows = [i for i, budget in enumerate(budgets) if budget > j]
            lengths = [len(seqs[i]) + j for i in rows]  # the drafted position j is computed now
            meta = DecodeMetadata.build(
                [seqs[i].slots for i in rows], self.pool.block_size, lengths, self.pool.dtype, self.batch_invariant
            )
            ids = torch.as_tensor([drafts[i][-1] if j else seqs[i].token_ids[-1] for i in rows], dtype=torch.long)
            positions = torch.as_tensor(lengths, dtype=torch.long) - 1
            logits = self.model(ids, positions, self.pool, meta, exit_after=self.layers)
            for i, row in zip(rows, logits):
                params = seqs[i].params
                if params.greedy:
                    drafts[i].append(int(torch.argmax(row)))
                    continue
                q = distribution(row, params)
                drafts[i].append(int(torch.multinomial(q, 1, generator=seqs[i].generator)))
                probs[i].append(q)
        return [Draft(tokens, p if p else None) for tokens, p in zip(drafts, probs)]
