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

from agentserve.contracts.segments import SegmentedPrompt, SharedBlock, SharedSpan, Sibling
from agentserve.engine.attention import PrefillMetadata
from agentserve.engine.blend import BlendInput, blend_known, blend_known_group, blend_prefill
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
        together: bool = False,
    ) -> RoundPrefill:
        """Prefill a round's prompts, in order, each after its cached prefix (`prefixes`, by prompt).

        Collective (`share_masters`): a prompt holding a block no master exists for yet *leads*:
        it is computed in full (exact for it) and its KV of each such block becomes the block's
        master, at the position it holds it; the prompts after it reuse that master. A master
        taken from a real prompt has its first tokens past real context, not at position 0 as
        attention sinks, and costs no forward of its own. With `together`, the prompts that reuse
        are recomputed together after the leaders: one forward per layer over all of their chosen
        tokens (`blend.blend_known_group`, TokenDance's collective recompute), each prompt's KV
        and logits the same bits as alone; a prompt whose selection needs the deviation (or the
        estimate) still runs alone.

        Per-request baseline (`share_masters=False`), position-independent caching as CacheBlend
        and EPIC run it: a chunk cache. Each block of the round that `masters` lacks is computed
        alone, at position 0, once for the round (the blocks side by side in one forward: their
        rows are independent), and every prompt reads it; then each prompt's selective recompute
        runs on its own, with the same selection budget and rule.

        New masters are added to `masters` (returned in `RoundPrefill.masters`)."""
        shared = masters if masters is not None else {}
        if prefixes is not None and len(prefixes) != len(prompts):
            raise ValueError(f"prefixes must be one per prompt: {len(prefixes)} for {len(prompts)} prompts")
        computed = master_tokens = standalone_tokens = 0
        prefills: list[ReusedPrefill | None] = [None] * len(prompts)
        grouped: list[int] = []
        if not share_masters:
            blocks = {
                span.block.content_id: span.block
                for prompt in prompts
                if self._needs_master(prompt)
                for span in prompt.shared_spans()
                if span.block.content_id not in shared
            }
            shared.update(self.masters_alone(list(blocks.values())))
            computed = len(blocks)
            master_tokens = standalone_tokens = sum(len(block.token_ids) for block in blocks.values())
        for i, prompt in enumerate(prompts):
            spans = prompt.shared_spans()
            prefix = prefixes[i] if prefixes is not None else None
            missing = [span for span in spans if span.block.content_id not in shared]
            if share_masters and missing and self._needs_master(prompt):
                prefill = self._exact(prompt, fell_back=False, deviation=0.0, prefix=prefix)
                prefill.stats = dataclasses.replace(prefill.stats, led=True)
                for span in missing:
                    k, v = prefill.k[:, span.start : span.end], prefill.v[:, span.start : span.end]
                    shared[span.block.content_id] = MasterKV(span.block, k.clone(), v.clone(), span.start)
                    computed, master_tokens = computed + 1, master_tokens + span.end - span.start
                prefill.siblings = tuple(Sibling(s.block.content_id, 0, s.end - s.start) for s in missing)
                prefills[i] = prefill
            elif share_masters and together and self._known(prompt):
                grouped.append(i)
            else:
                prefills[i] = self.prefill(prompt, shared, prefix)
        if grouped:
            group = [prompts[i] for i in grouped]
            group_prefixes = [prefixes[i] if prefixes is not None else None for i in grouped]
            for i, prefill in zip(grouped, self.prefill_group(group, shared, group_prefixes)):
                prefills[i] = prefill
        done = [p for p in prefills if p is not None]
        return RoundPrefill(done, computed, master_tokens, standalone_tokens, shared)

    def masters_alone(self, blocks: Sequence[SharedBlock]) -> dict[str, MasterKV]:
        """Each block's KV computed alone, at position 0 (a chunk cache), all in one forward per
        layer: each block its own sequence (`blend_known_group` with every token run), the bits
        `full` gives each alone."""
        if not blocks:
            return {}
        config = self.model.config
        inputs, chosen = [], []
        for block in blocks:
            n = len(block.token_ids)
            shape = (config.num_hidden_layers, n, config.num_key_value_heads, config.head_dim)
            ids = torch.as_tensor(block.token_ids, dtype=torch.long)
            inputs.append(
                BlendInput(
                    ids,
                    torch.empty(shape, dtype=self.dtype),
                    torch.empty(shape, dtype=self.dtype),
                    torch.zeros(n, dtype=torch.bool),
                )
            )
            chosen.append(torch.ones(n, dtype=torch.bool))
        blend_known_group(self.model, inputs, chosen)
        return {block.content_id: MasterKV(block, b.k, b.v) for block, b in zip(blocks, inputs)}

    def prefill_group(
        self,
        prompts: Sequence[SegmentedPrompt],
        masters: dict[str, MasterKV],
        prefixes: Sequence[PrefixKV | None],
    ) -> list[ReusedPrefill]:
        """Prompts whose chosen tokens are known before the forward (`_known`), each reusing
        `masters`, recomputed together (`blend_known_group`): what `prefill` gives each alone."""
        blends, chosen = [], []
        for prompt, prefix in zip(prompts, prefixes):
            spans = prompt.shared_spans()
            self._check_tail(prompt)
            self._check_masters(spans, masters)
            blends.append(
                self.blend_input(prompt.token_ids, [(s.start, masters[s.block.content_id]) for s in spans], prefix)
            )
            bounds = [(span.start, span.end) for span in spans]
            chosen.append(
                RecomputeSelector(prompt.reuse.recompute_fraction).choose(None, bounds, len(prompt.token_ids))
            )
        logits = blend_known_group(self.model, blends, chosen, tail=self.tail_logits)
        return [
            self._reused(prompt, masters, blend, picked, rows, 0.0)
            for prompt, blend, picked, rows in zip(prompts, blends, chosen, logits)
        ]

    def _known(self, prompt: SegmentedPrompt) -> bool:
        """Whether the prompt's recompute runs only its chosen tokens (`blend_known`): no estimate
        wanted, and every block's budget within its anchors."""
        bounds = [(span.start, span.end) for span in prompt.shared_spans()]
        return not self.estimate and RecomputeSelector(prompt.reuse.recompute_fraction).by_position(bounds)

    def prefill(
        self, prompt: SegmentedPrompt, masters: dict[str, MasterKV], prefix: PrefixKV | None = None
    ) -> ReusedPrefill:
        """One prompt, its blocks' masters in `masters` (by content id), after its cached `prefix`."""
        token_ids = prompt.token_ids
        spans = prompt.shared_spans()
        self._check_tail(prompt)
        if not self._needs_master(prompt):
            return self._exact(prompt, fell_back=False, deviation=0.0, prefix=prefix)
        self._check_masters(spans, masters)
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
        if self._known(prompt):
            chosen = selector.choose(None, bounds, len(token_ids))
            logits = blend_known(self.model, blend, chosen, tail=self.tail_logits)
        else:
            logits = blend_prefill(self.model, blend, choose, full_layers=self.full_layers, tail=self.tail_logits)
        if logits is None:
            return self._exact(prompt, fell_back=True, deviation=estimate, prefix=prefix)
        return self._reused(prompt, masters, blend, chosen, logits, estimate)

    def _check_tail(self, prompt: SegmentedPrompt) -> None:
        last = prompt.segments[-1]
        if self.tail_logits > 1 and (isinstance(last, SharedBlock) or len(last.token_ids) < self.tail_logits):
            raise ValueError(f"the prompt must end with at least {self.tail_logits} private tokens (tail_logits)")

    def _check_masters(self, spans: Sequence[SharedSpan], masters: dict[str, MasterKV]) -> None:
        for span in spans:
            master = masters.get(span.block.content_id)
            if master is None or master.block.token_ids != span.block.token_ids:
                raise ValueError(f"no master with the tokens of shared block {span.block.content_id!r}")

    def _reused(
        self,
        prompt: SegmentedPrompt,
        masters: dict[str, MasterKV],
        blend: BlendInput,
        chosen: torch.Tensor,
        logits: torch.Tensor,
        estimate: float,
    ) -> ReusedPrefill:
        """A blended prompt's result: its KV (the blend wrote it in place), the sibling of each
        block it holds (the rows recomputed in it), its stats."""
        spans = prompt.shared_spans()
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
            prompt_tokens=len(prompt.token_ids),
            shared_tokens=sum(span.end - span.start for span in spans),
            recomputed_shared_tokens=sum(len(s.recomputed_rows) for s in siblings),
            exact=False,
            fell_back=False,
            deviation=estimate,
        )
        return ReusedPrefill(logits, blend.k, blend.v, siblings, stats)

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
