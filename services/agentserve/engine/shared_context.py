"""Position-independent KV reuse of shared blocks, done collectively per all-gather round (TokenDance).

A shared block's *master* is its KV computed alone, at canonical positions [0, L) (`MasterKV`).
A prompt holding the block at `start` reuses it: keys re-rotated by `start` (exact for RoPE:
`RotaryEmbedding.shift`), values as they are, then a blended prefill (`blend`) recomputes the
private tokens and a `recompute_fraction` of each block's tokens (`recompute_selection`), which
repairs the block's attention to the private history before it.

`prefill_round` takes a round's prompts and computes each distinct block's master once for all of
them: the reuse cost is paid once per round, not once per agent. `share_masters=False` is the
per-request position-independent baseline: each prompt computes the masters it holds itself.

A request is served by full recompute (bit for bit the engine's own prefill) when it asks for
EXACT, when its fraction is 1 (every token recomputed: the master would be wasted work), or when
its estimated deviation passes `max_deviation` (the fallback).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import torch

from agentserve.contracts.segments import SegmentedPrompt, SharedBlock, Sibling
from agentserve.engine.attention import PrefillMetadata
from agentserve.engine.blend import BlendInput, blend_prefill
from agentserve.engine.kv_pool import KVPool
from agentserve.engine.model import CausalLM
from agentserve.engine.recompute_selection import RecomputeSelector, residual_deviation

# The estimated deviation above which a REUSE request is recomputed in full (see
# bench/tokendance_quality.py for the measurement it was read from).
DEFAULT_MAX_DEVIATION = 0.25


@dataclass(frozen=True)
class MasterKV:
    """A shared block's KV computed alone: `k`/`v` `[layers, L, kv_heads, head_dim]`, keys
    rotated at positions [start, start + L)."""

    block: SharedBlock
    k: torch.Tensor
    v: torch.Tensor
    start: int = 0


@dataclass(frozen=True)
class ReuseStats:
    """What one prompt's prefill computed, for the bench's accounting."""

    prompt_tokens: int
    shared_tokens: int
    recomputed_shared_tokens: int  # shared tokens computed in place (all of them when exact)
    exact: bool  # served by full recompute
    fell_back: bool  # exact because the estimated deviation passed the threshold
    deviation: float  # the estimate; 0 when none was made (exact asked, or fraction 1)

    @property
    def computed_tokens(self) -> int:
        """Tokens that ran through every layer: private ones plus the recomputed shared ones."""
        return self.prompt_tokens - self.shared_tokens + self.recomputed_shared_tokens


@dataclass
class ReusedPrefill:
    """One prompt's prefill: the last token's logits, its KV `[layers, T, kv_heads, head_dim]`,
    and per shared block the sibling it holds (empty when served exactly)."""

    logits: torch.Tensor
    k: torch.Tensor
    v: torch.Tensor
    siblings: tuple[Sibling, ...]
    stats: ReuseStats


@dataclass
class RoundPrefill:
    prefills: list[ReusedPrefill]
    masters_computed: int  # master prefills run for this round
    master_tokens: int  # their tokens
    masters: dict[str, MasterKV] = field(default_factory=dict)


class CollectiveReuse:
    """Blended prefills over the model's weights; holds no KV between calls (`masters` in and
    out of `prefill_round` is the caller's cache)."""

    def __init__(self, model: CausalLM, max_deviation: float | None = DEFAULT_MAX_DEVIATION, full_layers: int = 1):
        if max_deviation is not None and max_deviation < 0:
            raise ValueError(f"max_deviation must be >= 0, got {max_deviation}")
        self.model = model
        self.max_deviation = max_deviation
        self.full_layers = full_layers
        self.dtype = model.lm_head.weight.dtype

    def full(self, token_ids: Sequence[int]) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """Full recompute, the engine's prefill arithmetic on a scratch pool: last logits, K, V."""
        num_tokens = len(token_ids)
        pool = KVPool(self.model.config, 1, num_tokens, self.dtype)
        meta = PrefillMetadata.build([0], num_tokens, 0, num_tokens)
        ids = torch.as_tensor(list(token_ids), dtype=torch.long)
        logits = self.model(ids, slice(0, num_tokens), pool, meta, logits_rows=slice(-1, None))
        return logits[0], pool.k[:, 0], pool.v[:, 0]

    def master(self, block: SharedBlock) -> MasterKV:
        _, k, v = self.full(block.token_ids)
        return MasterKV(block, k, v)

    def prefill_round(
        self,
        prompts: Sequence[SegmentedPrompt],
        masters: dict[str, MasterKV] | None = None,
        share_masters: bool = True,
    ) -> RoundPrefill:
        """Prefill a round's prompts. Masters missing from `masters` are computed once and added
        to it (returned in `RoundPrefill.masters`); with `share_masters=False` every prompt
        computes its own and `masters` is left alone."""
        shared = masters if masters is not None else {}
        computed, master_tokens, prefills = 0, 0, []
        for prompt in prompts:
            own = shared if share_masters else {}
            for span in prompt.shared_spans():
                if self._needs_master(prompt) and span.block.content_id not in own:
                    own[span.block.content_id] = self.master(span.block)
                    computed += 1
                    master_tokens += len(span.block.token_ids)
            prefills.append(self.prefill(prompt, own))
        return RoundPrefill(prefills, computed, master_tokens, shared)

    def prefill(self, prompt: SegmentedPrompt, masters: dict[str, MasterKV]) -> ReusedPrefill:
        """One prompt, its blocks' masters in `masters` (by content id)."""
        token_ids = prompt.token_ids
        spans = prompt.shared_spans()
        shared_tokens = sum(span.end - span.start for span in spans)
        if not self._needs_master(prompt):
            return self._exact(token_ids, shared_tokens, fell_back=False, deviation=0.0)
        for span in spans:
            master = masters.get(span.block.content_id)
            if master is None or master.block.token_ids != span.block.token_ids:
                raise ValueError(f"no master with the tokens of shared block {span.block.content_id!r}")
        blend = self.blend_input(token_ids, [(span.start, masters[span.block.content_id]) for span in spans])
        selector = RecomputeSelector(prompt.reuse.recompute_fraction)
        bounds = [(span.start, span.end) for span in spans]
        estimate, chosen = 0.0, torch.ones(len(token_ids), dtype=torch.bool)

        def choose(deviation: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor | None:
            nonlocal estimate, chosen
            chosen = selector.choose(deviation, bounds)
            estimate = residual_deviation(deviation, k, v, blend.shared, chosen)
            return None if self.max_deviation is not None and estimate > self.max_deviation else chosen

        k_out, v_out = torch.empty_like(blend.k), torch.empty_like(blend.v)

        def sink(layer: int, k: torch.Tensor, v: torch.Tensor) -> None:
            k_out[layer], v_out[layer] = k, v

        logits = blend_prefill(self.model, blend, choose, sink, self.full_layers)
        if logits is None:
            return self._exact(token_ids, shared_tokens, fell_back=True, deviation=estimate)
        siblings = tuple(
            Sibling(
                master_id=span.block.content_id,
                position_offset=span.start - masters[span.block.content_id].start,
                num_tokens=span.end - span.start,
                recomputed_rows=tuple(chosen[span.start : span.end].nonzero().flatten().tolist()),
            )
            for span in spans
        )
        stats = ReuseStats(
            prompt_tokens=len(token_ids),
            shared_tokens=shared_tokens,
            recomputed_shared_tokens=sum(len(s.recomputed_rows) for s in siblings),
            exact=False,
            fell_back=False,
            deviation=estimate,
        )
        return ReusedPrefill(logits, k_out, v_out, siblings, stats)

    def _needs_master(self, prompt: SegmentedPrompt) -> bool:
        return not prompt.reuse.exact and prompt.reuse.recompute_fraction < 1.0

    def _exact(self, token_ids: list[int], shared_tokens: int, fell_back: bool, deviation: float) -> ReusedPrefill:
        logits, k, v = self.full(token_ids)
        stats = ReuseStats(len(token_ids), shared_tokens, shared_tokens, True, fell_back, deviation)
        return ReusedPrefill(logits, k, v, (), stats)

    def blend_input(self, token_ids: list[int], placed: list[tuple[int, MasterKV]]) -> BlendInput:
        """Each master's KV moved to where the prompt holds its block (other rows zero)."""
        config = self.model.config
        shape = (config.num_hidden_layers, len(token_ids), config.num_key_value_heads, config.head_dim)
        k, v = torch.zeros(shape, dtype=self.dtype), torch.zeros(shape, dtype=self.dtype)
        shared = torch.zeros(len(token_ids), dtype=torch.bool)
        rotary = self.model.model.rotary_emb
        for start, master in placed:
            end = start + master.k.shape[1]
            k[:, start:end] = rotary.shift(master.k, start - master.start)
            v[:, start:end] = master.v
            shared[start:end] = True
        return BlendInput(torch.as_tensor(token_ids, dtype=torch.long), k, v, shared)
