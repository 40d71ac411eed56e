"""Speculator: the engine's side of a speculative decode step, around the verify forward.

Before the forward it gives each running sequence a draft budget (up to `k`, no further than its
`max_tokens`, none under a grammar, whose matcher advances one sampled token at a time) and takes
the pool slots those positions need, only from free slots: a draft never preempts anyone. After
the engine has taken the accepted tokens (`LLMEngine._decode_speculative`), `roll_back` returns
the slots past the sequence's tokens; the rejected positions' KV rows lie past its last computed
token, where the next step's forward overwrites them, so the block table is all that changes.
"""

from __future__ import annotations

from collections.abc import Sequence as Seq
from dataclasses import dataclass

from agentserve.engine.kv_pool import KVPool
from agentserve.engine.model import CausalLM
from agentserve.engine.sequence import Sequence
from agentserve.engine.speculative.config import SpeculativeConfig
from agentserve.engine.speculative.drafters import Draft, Drafter, PromptLookup
from agentserve.engine.speculative.early_exit import EarlyExitDrafter
from agentserve.kv.block_manager import BlockManager


@dataclass
class SpeculationStats:
    """Counts over the engine's speculative steps, per sequence and step."""

    sequence_steps: int = 0  # (sequence, step) pairs verified
    drafted: int = 0  # draft tokens proposed
    accepted: int = 0  # draft tokens kept

    @property
    def tokens_per_step(self) -> float:
        """Tokens a sequence gains per step: its kept draft tokens plus the target's own one."""
        return (self.accepted + self.sequence_steps) / self.sequence_steps if self.sequence_steps else 0.0


def make_drafter(config: SpeculativeConfig, model: CausalLM, pool: KVPool, batch_invariant: bool) -> Drafter:
    if config.method == "ngram":
        return PromptLookup(config.ngram)
    if config.method == "draft":
        return EarlyExitDrafter(model, pool, config.draft_layers, batch_invariant)
    raise ValueError(f"speculative method {config.method!r} drafts nothing")


class Speculator:
    def __init__(self, config: SpeculativeConfig, drafter: Drafter, blocks: BlockManager, block_size: int) -> None:
        self.k = config.k
        self.drafter = drafter
        self.blocks = blocks
        self.block_size = block_size
        self.stats = SpeculationStats()

    def draft(self, seqs: Seq[Sequence]) -> list[Draft]:
        """Reserve each sequence's draft positions, then ask the drafter to fill them."""
        return self.drafter.propose(seqs, [self._reserve(seq) for seq in seqs])

    def _reserve(self, seq: Sequence) -> int:
        if seq.grammar is not None:
            return 0
        budget = min(self.k, seq.params.max_tokens - seq.num_output_tokens - 1)
        for j in range(1, budget + 1):  # position len(seq) + j - 1 holds draft token j
            if not self.blocks.can_append(seq.slots, len(seq) + j):
                return j - 1
            self.blocks.append(seq.slots, len(seq) + j)
        return max(budget, 0)

    def roll_back(self, seq: Sequence, drafted: int, accepted: int) -> None:
        """Count the step, and free `seq`'s slots past its tokens (a finished sequence freed all)."""
        self.stats.sequence_steps += 1
        self.stats.drafted += drafted
        self.stats.accepted += accepted
        if seq.finished:
            return
        keep = -(-len(seq) // self.block_size)
        if len(seq.slots) > keep:
            self.blocks.free(seq.slots[keep:])
            del seq.slots[keep:]
