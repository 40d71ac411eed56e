"""Position-independent KV reuse of shared blocks, done collectively per all-gather round (TokenDance).

A shared block's *master* is one computed copy of its KV, at recorded positions (`MasterKV`).
A prompt holding the block at `start` reuses it: keys re-rotated by `start - master.start` (exact for RoPE:
`RotaryEmbedding.shift`), values as they are, then a blended prefill (`blend`) recomputes the
private tokens and a `recompute_fraction` of each block's tokens (`recompute_selection`), which
repairs the block's attention to the private history before it.

`prefill_round` takes a round's prompts and makes each distinct block's master once for all of
them, from the first prompt that holds it (computed in full): the reuse cost is paid once per
round, not once per agent. `share_masters=False` is the per-request position-independent
baseline: each prompt computes the masters it holds itself, alone at position 0.

Why masters from a prompt rather than alone: a block computed alone starts at position 0, so its
first tokens are attention sinks and every token saw only its own block; in another agent's
prompt a master taken from a real prompt is much closer: with the trained default model, masters
from the round's first prompt give higher top-1 agreement and lower KL than masters computed alone
(docs/tokendance.md).

A prompt may come with a cached prefix (`PrefixKV`: its first tokens' exact KV, e.g. the agent's
history from the prefix cache): every path then runs only the tokens after it, as a prefix-cache
hit does in a plain prefill.

A request is served by full recompute (bit for bit the engine's own prefill) when it asks for
EXACT, when its fraction is 1 (every token recomputed: the master would be wasted work), or when
its estimated deviation passes `max_deviation` (the fallback).
"""

from __future__ import annotations

import dataclasses
from bisect import bisect_left
from collections.abc import Sequence
from dataclasses import dataclass, field

import torch

from agentserve.contracts.segments import SegmentedPrompt, SharedBlock, Sibling
from agentserve.engine.attention import PrefillMetadata
from agentserve.engine.blend import BlendInput, blend_known, blend_prefill
from agentserve.engine.kv_pool import KVPool
from agentserve.engine.model import CausalLM
from agentserve.engine.recompute_selection import DEFAULT_MAX_DEVIATION, RecomputeSelector, residual_deviation


@dataclass(frozen=True)
class MasterKV:
    """A shared block's KV computed alone: `k`/`v` `[layers, L, kv_heads, head_dim]`, keys
    rotated at positions [start, start + L)."""

    block: SharedBlock
    k: torch.Tensor
    v: torch.Tensor
    start: int = 0


@dataclass(frozen=True)
class PrefixKV:
    """A prompt's cached first tokens: `k`/`v` `[layers, n, kv_heads, head_dim]`, at positions [0, n)."""

    k: torch.Tensor
    v: torch.Tensor

    @property
    def num_tokens(self) -> int:
        return self.k.shape[1]


@dataclass(frozen=True)
class ReuseStats:
    """What one prompt's prefill computed, for the bench's accounting."""

    prompt_tokens: int
    shared_tokens: int
    recomputed_shared_tokens: int  # shared tokens computed in place (all of them when exact)
    exact: bool  # served by full recompute
    fell_back: bool  # exact because the estimated deviation passed the threshold
    deviation: float  # the estimate; 0 when none was made (exact asked, fraction 1, or `estimate=False`)
    led: bool = False  # computed in full to give its round the masters it lacked

    @property
    def computed_tokens(self) -> int:
        """Tokens that ran through every layer: private ones plus the recomputed shared ones."""
        return self.prompt_tokens - self.shared_tokens + self.recomputed_shared_tokens


@dataclass
class ReusedPrefill:
    """One prompt's prefill: the logits of its last `tail_logits` tokens `[tail_logits, vocab]`,
    its KV `[layers, T, kv_heads, head_dim]`, and per shared block the sibling it holds (empty when
    served exactly, except a round's leader: its blocks are the masters, offset 0, no rows)."""

    logits: torch.Tensor
    k: torch.Tensor
    v: torch.Tensor
    siblings: tuple[Sibling, ...]
    stats: ReuseStats


@dataclass
class RoundPrefill:
    prefills: list[ReusedPrefill]
    masters_computed: int  # masters made this round
    master_tokens: int  # their tokens
    standalone_master_tokens: int  # of those, computed in forwards of their own (0 when collective)
    masters: dict[str, MasterKV] = field(default_factory=dict)


class CollectiveReuse:
    """Blended prefills over the model's weights; holds no KV between calls (`masters` in and
    out of `prefill_round` is the caller's cache)."""

    def __init__(
        self,
        model: CausalLM,
        max_deviation: float | None = DEFAULT_MAX_DEVIATION,
        full_layers: int = 1,
        tail_logits: int = 1,
        estimate: bool = True,
    ):
        """`tail_logits`: how many of a prompt's last tokens to return logits for (the quality
        measurement scores several); those tokens must be private, at the prompt's end.

        `estimate=False` (only with no `max_deviation`, which needs it): no deviation estimate is
        made where the selection does not need the deviation either (every block's budget within
        its anchors): such a prompt's blend runs only its chosen tokens, in every layer
        (`blend.blend_known`), and reports deviation 0. The timed benches, which serve without the
        fallback, use it; the quality bench keeps the estimate (it reports the fallback rate)."""
        if max_deviation is not None and max_deviation < 0:
            raise ValueError(f"max_deviation must be >= 0, got {max_deviation}")
        if max_deviation is not None and not estimate:
            raise ValueError("estimate=False needs max_deviation=None: the fallback reads the estimate")
        if tail_logits < 1:
            raise ValueError(f"tail_logits must be >= 1, got {tail_logits}")
        self.model = model
        self.max_deviation = max_deviation
        self.full_layers = full_layers
        self.tail_logits = tail_logits
        self.estimate = estimate
        self.dtype = model.lm_head.weight.dtype

    def full(
        self, token_ids: Sequence[int], prefix: PrefixKV | None = None
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """Full recompute (of the tokens after `prefix`), the engine's prefill arithmetic on a
        scratch pool: the last `tail_logits` tokens' logits, K, V of the whole prompt."""
        num_tokens = len(token_ids)
        cached = _cached_tokens(prefix, num_tokens)
        pool = KVPool(self.model.config, 1, num_tokens, self.dtype)
        if prefix is not None:
            pool.k[:, 0, :cached], pool.v[:, 0, :cached] = prefix.k, prefix.v
        meta = PrefillMetadata.build([0], num_tokens, cached, num_tokens - cached)
        ids = torch.as_tensor(list(token_ids[cached:]), dtype=torch.long)
        logits = self.model(ids, slice(cached, num_tokens), pool, meta, logits_rows=slice(-self.tail_logits, None))
        return logits, pool.k[:, 0], pool.v[:, 0]

    def master(self, block: SharedBlock) -> MasterKV:
        _, k, v = self.full(block.token_ids)
        return MasterKV(block, k, v)

    def prefill_round(
        self,
        prompts: Sequence[SegmentedPrompt],
        masters: dict[str, MasterKV] | None = None,
        share_masters: bool = True,
        prefixes: Sequence[PrefixKV | None] | None = None,
    ) -> RoundPrefill:
        """Prefill a round's prompts, in order, each after its cached prefix (`prefixes`, by prompt).

        Collective (`share_masters`): a prompt holding a block no master exists for yet *leads*:
        it is computed in full (exact for it) and its KV of each such block becomes the block's
        master, at the position it holds it; the prompts after it reuse that master. A master
        taken from a real prompt has its first tokens past real context, not at position 0 as
        attention sinks, and costs no forward of its own. New masters are added to `masters`
        (returned in `RoundPrefill.masters`).

        Per-request baseline (`share_masters=False`): every prompt computes the masters it holds
        alone, at position 0, then reuses them (classic position-independent caching);
        `masters` is left alone."""
        shared = masters if masters is not None else {}
        if prefixes is not None and len(prefixes) != len(prompts):
            raise ValueError(f"prefixes must be one per prompt: {len(prefixes)} for {len(prompts)} prompts")
        computed = master_tokens = standalone_tokens = 0
        prefills = []
        for i, prompt in enumerate(prompts):
            spans = prompt.shared_spans()
            prefix = prefixes[i] if prefixes is not None else None
            if share_masters:
                missing = [span for span in spans if span.block.content_id not in shared]
                if missing and self._needs_master(prompt):
                    prefill = self._exact(prompt, fell_back=False, deviation=0.0, prefix=prefix)
                    prefill.stats = dataclasses.replace(prefill.stats, led=True)
                    for span in missing:
                        k, v = prefill.k[:, span.start : span.end], prefill.v[:, span.start : span.end]
                        shared[span.block.content_id] = MasterKV(span.block, k.clone(), v.clone(), span.start)
                        computed, master_tokens = computed + 1, master_tokens + span.end - span.start
                    prefill.siblings = tuple(Sibling(s.block.content_id, 0, s.end - s.start) for s in missing)
                    prefills.append(prefill)
                    continue
                prefills.append(self.prefill(prompt, shared, prefix))
                continue
            own: dict[str, MasterKV] = {}
            if self._needs_master(prompt):
                for span in spans:
                    own[span.block.content_id] = self.master(span.block)
                    computed, master_tokens = computed + 1, master_tokens + span.end - span.start
                    standalone_tokens += span.end - span.start
            prefills.append(self.prefill(prompt, own, prefix))
        return RoundPrefill(prefills, computed, master_tokens, standalone_tokens, shared)

    def prefill(
        self, prompt: SegmentedPrompt, masters: dict[str, MasterKV], prefix: PrefixKV | None = None
    ) -> ReusedPrefill:
        """One prompt, its blocks' masters in `masters` (by content id), after its cached `prefix`."""
        token_ids = prompt.token_ids
        spans = prompt.shared_spans()
        last = prompt.segments[-1]
        if self.tail_logits > 1 and (isinstance(last, SharedBlock) or len(last.token_ids) < self.tail_logits):
            raise ValueError(f"the prompt must end with at least {self.tail_logits} private tokens (tail_logits)")
        shared_tokens = sum(span.end - span.start for span in spans)
        if not self._needs_master(prompt):
            return self._exact(prompt, fell_back=False, deviation=0.0, prefix=prefix)
        for span in spans:
            master = masters.get(span.block.content_id)
            if master is None or master.block.token_ids != span.block.token_ids:
                raise ValueError(f"no master with the tokens of shared block {span.block.content_id!r}")
        blend = self.blend_input(token_ids, [(span.start, masters[span.block.content_id]) for span in spans], prefix)
        selector = RecomputeSelector(prompt.reuse.recompute_fraction)
        bounds = [(span.start, span.end) for span in spans]
        estimate, chosen = 0.0, torch.ones(len(token_ids), dtype=torch.bool)

        def choose(deviation: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor | None:
            nonlocal estimate, chosen
            chosen = selector.choose(deviation, bounds)
            estimate = residual_deviation(deviation, k, v, blend.shared, chosen)
            return None if self.max_deviation is not None and estimate > self.max_deviation else chosen

        logits: torch.Tensor | None
        if not self.estimate and selector.by_position(bounds):
            chosen = selector.choose(None, bounds, len(token_ids))
            logits = blend_known(self.model, blend, chosen, tail=self.tail_logits)
        else:
            logits = blend_prefill(self.model, blend, choose, full_layers=self.full_layers, tail=self.tail_logits)
        if logits is None:
            return self._exact(prompt, fell_back=True, deviation=estimate, prefix=prefix)
        recomputed = chosen.nonzero().flatten().tolist()
        siblings = tuple(
            Sibling(
                master_id=span.block.content_id,
                position_offset=span.start - masters[span.block.content_id].start,
                num_tokens=span.end - span.start,
                recomputed_rows=tuple(
                    row - span.start
                    for row in recomputed[bisect_left(recomputed, span.start) : bisect_left(recomputed, span.end)]
                ),
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
        return ReusedPrefill(logits, blend.k, blend.v, siblings, stats)  # the blend wrote the KV there

    def _needs_master(self, prompt: SegmentedPrompt) -> bool:
        return not prompt.reuse.exact and prompt.reuse.recompute_fraction < 1.0

    def _exact(
        self, prompt: SegmentedPrompt, fell_back: bool, deviation: float, prefix: PrefixKV | None = None
    ) -> ReusedPrefill:
        token_ids = prompt.token_ids
        shared_tokens = sum(span.end - span.start for span in prompt.shared_spans())
        logits, k, v = self.full(token_ids, prefix)
        stats = ReuseStats(len(token_ids), shared_tokens, shared_tokens, True, fell_back, deviation)
        return ReusedPrefill(logits, k, v, (), stats)

    def blend_input(
        self, token_ids: list[int], placed: list[tuple[int, MasterKV]], prefix: PrefixKV | None = None
    ) -> BlendInput:
        """Each master's KV moved to where the prompt holds its block, the cached prefix's KV in
        its rows. The other rows are left unset (`torch.empty`: no pass over the prompt's KV to
        zero it): they are private tokens after the prefix, which every blend runs and writes in
        each layer before attention reads them (`BlendInput`: never read)."""
        config = self.model.config
        shape = (config.num_hidden_layers, len(token_ids), config.num_key_value_heads, config.head_dim)
        k, v = torch.empty(shape, dtype=self.dtype), torch.empty(shape, dtype=self.dtype)
        shared = torch.zeros(len(token_ids), dtype=torch.bool)
        cached = _cached_tokens(prefix, len(token_ids))
        if prefix is not None:
            k[:, :cached], v[:, :cached] = prefix.k, prefix.v
        if placed:
            # Every block in one pass (per block, a prompt of N blocks made N small rotations).
            lengths = torch.as_tensor([m.k.shape[1] for _, m in placed])
            starts = torch.as_tensor([start for start, _ in placed])
            offsets = torch.as_tensor([start - m.start for start, m in placed])
            into = torch.cumsum(lengths, 0) - lengths  # each block's first row among the concatenated
            rows = torch.repeat_interleave(starts - into, lengths) + torch.arange(int(lengths.sum()))
            keys = torch.cat([m.k for _, m in placed], dim=1)
            moved = self.model.model.rotary_emb.shift_rows(keys, torch.repeat_interleave(offsets, lengths))
            k.index_copy_(1, rows, moved)
            v.index_copy_(1, rows, torch.cat([m.v for _, m in placed], dim=1))
            shared[rows] = True
        return BlendInput(torch.as_tensor(token_ids, dtype=torch.long), k, v, shared, cached)


def _cached_tokens(prefix: PrefixKV | None, num_tokens: int) -> int:
    """The prefix's length, checked to leave the prompt's last token to run (its logits are wanted)."""
    if prefix is None:
        return 0
    if not 0 <= prefix.num_tokens < num_tokens:
        raise ValueError(
            f"a cached prefix must be shorter than the prompt ({num_tokens} tokens), got {prefix.num_tokens}"
        )
    return prefix.num_tokens
