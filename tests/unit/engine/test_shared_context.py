"""CollectiveReuse: masters once per round, siblings that are their master moved plus the
recomputed rows, full recompute when asked, at fraction 1 or past the deviation threshold."""

from __future__ import annotations

import dataclasses

import pytest
import torch

from agentserve.contracts.segments import EXACT, PrivateSegment, ReusePolicy, SegmentedPrompt, SharedBlock
from agentserve.engine.blend import blend_known, blend_prefill
from agentserve.engine.loader import load_model
from agentserve.engine.shared_context import CollectiveReuse, PrefixKV

pytestmark = pytest.mark.unit


@pytest.fixture(scope="module")
def model(tiny_model_dir):
    return load_model(tiny_model_dir)[0]


def _tokens(seed: int, n: int) -> tuple[int, ...]:
    return tuple(torch.randint(300, 8000, (n,), generator=torch.Generator().manual_seed(seed)).tolist())


BLOCKS = [SharedBlock(f"agent-{i}", 0, _tokens(100 + i, 24)) for i in range(3)]


def _round(fraction: float = 0.25) -> list[SegmentedPrompt]:
    """Three agents: own history, then the gathered outputs in an agent-specific order, then a question."""
    orders = [(0, 1, 2), (2, 0, 1), (1, 2, 0)]
    reuse = ReusePolicy(recompute_fraction=fraction)
    return [
        SegmentedPrompt(
            (PrivateSegment(_tokens(a, 10 + 3 * a)), *(BLOCKS[i] for i in order), PrivateSegment(_tokens(50 + a, 4))),
            reuse,
        )
        for a, order in enumerate(orders)
    ]


def test_a_round_takes_each_master_once_from_its_first_prompt_the_baseline_from_a_chunk_cache(model) -> None:
    reuse = CollectiveReuse(model, max_deviation=None)
    collective = reuse.prefill_round(_round())
    per_request = reuse.prefill_round(_round(), share_masters=False)
    assert (collective.masters_computed, collective.master_tokens, collective.standalone_master_tokens) == (3, 72, 0)
    # The baseline's chunk cache: each block computed once for the round, alone at position 0 (the
    # blocks side by side in one forward), the bits of computing each on its own; every prompt reads it.
    assert (per_request.masters_computed, per_request.master_tokens, per_request.standalone_master_tokens) == (
        3,
        72,
        72,
    )
    for block in BLOCKS:
        alone, cached = reuse.master(block), per_request.masters[block.content_id]
        assert cached.start == 0 and torch.equal(cached.k, alone.k) and torch.equal(cached.v, alone.v)
    assert [{s.master_id for s in p.siblings} for p in per_request.prefills] == [{b.content_id for b in BLOCKS}] * 3
    # The first prompt leads: computed in full, its blocks' KV where it holds them are the masters.
    leader, prompt = collective.prefills[0], _round()[0]
    logits, k, _ = reuse.full(prompt.token_ids)
    assert leader.stats.led and leader.stats.exact and torch.equal(leader.logits, logits)
    assert [(s.master_id, s.position_offset, s.recomputed_rows) for s in leader.siblings] == [
        ("agent-0", 0, ()),
        ("agent-1", 0, ()),
        ("agent-2", 0, ()),
    ]
    for span in prompt.shared_spans():
        master = collective.masters[span.block.content_id]
        assert master.start == span.start and torch.equal(master.k, k[:, span.start : span.end])
    assert not any(p.stats.exact for p in collective.prefills[1:])
    assert not any(p.stats.exact for p in per_request.prefills)
    # A later round holding the same blocks takes no master again, and no prompt leads.
    again = reuse.prefill_round(_round(), collective.masters)
    assert again.masters_computed == 0 and not any(p.stats.exact for p in again.prefills)


def test_recomputing_every_token_in_the_blend_is_the_full_prefill_bit_for_bit(model) -> None:
    """Past layer 0, every recomputed row and the logits are the full prefill's bits. Layer 0's
    shared rows are handed on as the re-rotated master's (its KV depends on token and position
    only): values bit for bit the full prefill's, keys its fresh rotation up to rounding."""
    reuse = CollectiveReuse(model, max_deviation=None)
    prompt = _round()[0]
    masters = {b.content_id: reuse.master(b) for b in BLOCKS}
    placed = [(span.start, masters[span.block.content_id]) for span in prompt.shared_spans()]
    blend = reuse.blend_input(prompt.token_ids, placed)
    k, v = torch.empty_like(blend.k), torch.empty_like(blend.v)

    def sink(layer: int, layer_k: torch.Tensor, layer_v: torch.Tensor) -> None:
        k[layer], v[layer] = layer_k, layer_v

    logits = blend_prefill(model, blend, lambda dev, k_, v_: torch.ones(len(prompt.token_ids), dtype=torch.bool), sink)
    full_logits, full_k, full_v = reuse.full(prompt.token_ids)
    assert logits is not None
    assert torch.equal(logits, full_logits) and torch.equal(k[1:], full_k[1:]) and torch.equal(v, full_v)
    shared = blend.shared
    assert torch.equal(k[0, ~shared], full_k[0, ~shared]) and torch.equal(k[0, shared], blend.k[0, shared])
    assert not torch.equal(k[0, shared], full_k[0, shared])  # a re-rotation is not a fresh rotation's bits
    torch.testing.assert_close(k[0, shared], full_k[0, shared], rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("policy", [EXACT, ReusePolicy(recompute_fraction=1.0)])
def test_exact_and_fraction_1_are_the_full_recompute(model, policy: ReusePolicy) -> None:
    reuse = CollectiveReuse(model)
    prompt = SegmentedPrompt(_round()[0].segments, policy)
    result = reuse.prefill_round([prompt])
    logits, k, v = reuse.full(prompt.token_ids)
    prefill = result.prefills[0]
    assert result.masters_computed == 0 and prefill.siblings == ()
    assert torch.equal(prefill.logits, logits) and torch.equal(prefill.k, k) and torch.equal(prefill.v, v)
    assert (prefill.stats.exact, prefill.stats.fell_back, prefill.stats.recomputed_shared_tokens) == (True, False, 72)


def test_a_request_past_the_deviation_threshold_falls_back_to_full_recompute(model) -> None:
    prompt = _round(0.25)[2]
    masters = {b.content_id: CollectiveReuse(model).master(b) for b in BLOCKS}
    estimate = CollectiveReuse(model, max_deviation=None).prefill(prompt, masters).stats.deviation
    assert estimate > 0
    below = CollectiveReuse(model, max_deviation=estimate * 1.01).prefill(prompt, masters)
    above = CollectiveReuse(model, max_deviation=estimate * 0.99).prefill(prompt, masters)
    assert (below.stats.exact, below.stats.fell_back) == (False, False)
    assert (above.stats.exact, above.stats.fell_back, above.stats.deviation) == (True, True, estimate)
    assert torch.equal(above.logits, CollectiveReuse(model).full(prompt.token_ids)[0])


def test_a_master_with_other_tokens_is_refused(model) -> None:
    reuse = CollectiveReuse(model)
    prompt = _round()[0]
    masters = {b.content_id: reuse.master(b) for b in BLOCKS}
    masters["agent-1"] = reuse.master(SharedBlock("agent-1", 0, _tokens(7, 24)))
    with pytest.raises(ValueError, match="no master with the tokens of shared block 'agent-1'"):
        reuse.prefill(prompt, masters)
    with pytest.raises(ValueError, match="max_deviation must be >= 0"):
        CollectiveReuse(model, max_deviation=-1.0)


def test_a_cached_prefix_is_attended_to_not_run_and_gives_the_uncached_prefill(model) -> None:
    """An agent's history held by the prefix cache: the blend runs only the tokens after it, and
    its KV and logits are those of the prefill that computes the history too (the same tokens
    chosen, the history's rows the exact prefill's)."""
    reuse = CollectiveReuse(model, max_deviation=None)
    leader, prompt = _round()[0], _round()[1]
    masters = reuse.prefill_round([leader]).masters
    history = len(prompt.segments[0].token_ids)
    _, k, v = reuse.full(prompt.token_ids[:history])
    cached = reuse.prefill(prompt, masters, PrefixKV(k, v))
    uncached = reuse.prefill(prompt, masters)
    assert cached.siblings == uncached.siblings
    assert cached.stats == uncached.stats
    assert torch.equal(cached.k[:, :history], k) and torch.equal(cached.v[:, :history], v)
    torch.testing.assert_close(cached.k, uncached.k, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(cached.v, uncached.v, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(cached.logits, uncached.logits, rtol=1e-4, atol=1e-4)
    # The leader's full recompute after a cached prefix: the engine's prefix-cache-hit arithmetic.
    led = reuse.prefill_round([_round()[1]], prefixes=[PrefixKV(k, v)]).prefills[0]
    logits, k_full, _ = reuse.full(prompt.token_ids)
    assert led.stats.led
    torch.testing.assert_close(led.logits, logits, rtol=1e-4, atol=1e-4)
    torch.testing.assert_close(led.k, k_full, rtol=1e-5, atol=1e-5)


def test_a_cached_prefix_must_end_before_the_first_shared_block(model) -> None:
    reuse = CollectiveReuse(model, max_deviation=None)
    leader, prompt = _round()[0], _round()[1]
    masters = reuse.prefill_round([leader]).masters
    too_long = len(prompt.segments[0].token_ids) + 1
    _, k, v = reuse.full(prompt.token_ids[:too_long])
    with pytest.raises(
        ValueError, match=r"cached must be in \[0, 13\] \(before the first shared token and the last token\), got 14"
    ):
        reuse.prefill(prompt, masters, PrefixKV(k, v))
    with pytest.raises(ValueError, match="one per prompt: 0 for 1 prompts"):
        reuse.prefill_round([prompt], prefixes=[])


def _history_prefix(reuse: CollectiveReuse, prompt: SegmentedPrompt) -> PrefixKV:
    """The prompt's private history as the prefix cache would hold it."""
    _, k, v = reuse.full(prompt.token_ids[: len(prompt.segments[0].token_ids)])
    return PrefixKV(k, v)


def test_without_an_estimate_a_choice_by_position_runs_the_chosen_tokens_alone(model) -> None:
    """At 0.05 a 24-token block's budget is its 2 anchors: with no estimate wanted, no layer runs
    the other shared tokens. The same tokens are chosen and layer 0's KV handed on is the same
    bits (the reused rows, the private tokens' fresh ones); past it the chosen tokens differ only
    by having attended, in layer 0, to the re-rotated master's keys, which are the fresh
    rotation's up to rounding."""
    estimating = CollectiveReuse(model, max_deviation=None)
    leader, prompt = _round(0.05)[0], _round(0.05)[1]
    masters = estimating.prefill_round([leader]).masters
    prefix = _history_prefix(estimating, prompt)
    known = CollectiveReuse(model, max_deviation=None, estimate=False).prefill(prompt, masters, prefix)
    blended = estimating.prefill(prompt, masters, prefix)
    assert [s.recomputed_rows for s in known.siblings] == [(0, 1)] * 3 and known.siblings == blended.siblings
    assert blended.stats.deviation > 0 and known.stats == dataclasses.replace(blended.stats, deviation=0.0)
    assert torch.equal(known.k[0], blended.k[0]) and torch.equal(known.v[0], blended.v[0])
    torch.testing.assert_close(known.k, blended.k, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(known.v, blended.v, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(known.logits, blended.logits, rtol=1e-4, atol=1e-4)


def test_without_an_estimate_a_budget_past_the_anchors_still_reads_the_deviation(model) -> None:
    estimating = CollectiveReuse(model, max_deviation=None)
    leader, prompt = _round(0.25)[0], _round(0.25)[1]
    masters = estimating.prefill_round([leader]).masters
    prefix = _history_prefix(estimating, prompt)
    known = CollectiveReuse(model, max_deviation=None, estimate=False).prefill(prompt, masters, prefix)
    blended = estimating.prefill(prompt, masters, prefix)
    assert known.stats == blended.stats and known.stats.deviation > 0 and known.siblings == blended.siblings
    assert torch.equal(known.logits, blended.logits) and torch.equal(known.k, blended.k)


def test_a_known_choice_of_every_token_is_the_full_prefill_bit_for_bit_past_layer_0(model) -> None:
    reuse = CollectiveReuse(model, max_deviation=None)
    prompt = _round()[0]
    masters = {b.content_id: reuse.master(b) for b in BLOCKS}
    blend = reuse.blend_input(prompt.token_ids, [(s.start, masters[s.block.content_id]) for s in prompt.shared_spans()])
    reused_k0 = blend.k[0].clone()
    logits = blend_known(model, blend, torch.ones(len(prompt.token_ids), dtype=torch.bool))
    full_logits, full_k, full_v = reuse.full(prompt.token_ids)
    assert torch.equal(logits, full_logits) and torch.equal(blend.k[1:], full_k[1:]) and torch.equal(blend.v, full_v)
    shared = blend.shared
    assert torch.equal(blend.k[0, ~shared], full_k[0, ~shared]) and torch.equal(blend.k[0, shared], reused_k0[shared])


def test_a_known_choice_must_hold_every_private_token_and_an_estimate_is_refused_off_with_a_threshold(model) -> None:
    reuse = CollectiveReuse(model, max_deviation=None)
    prompt = _round()[0]
    masters = {b.content_id: reuse.master(b) for b in BLOCKS}
    blend = reuse.blend_input(prompt.token_ids, [(s.start, masters[s.block.content_id]) for s in prompt.shared_spans()])
    chosen = torch.ones(len(prompt.token_ids), dtype=torch.bool)
    chosen[3] = False  # a private token of the history
    with pytest.raises(ValueError, match="chosen must include every private token after the cached prefix"):
        blend_known(model, blend, chosen)
    with pytest.raises(ValueError, match=r"chosen must be a \[86\] bool tensor, got \(85,\) torch.bool"):
        blend_known(model, blend, chosen[1:])
    with pytest.raises(ValueError, match="estimate=False needs max_deviation=None"):
        CollectiveReuse(model, max_deviation=0.2, estimate=False)


def test_a_round_recomputed_together_is_each_prompt_recomputed_alone_bit_for_bit(model) -> None:
    """TokenDance's collective recompute: the followers' chosen tokens in one forward per layer
    (`together`), their KV, logits and siblings those of recomputing each on its own. Here every
    block's budget is its anchors (fraction 0.05 of 24 tokens), so the choice is by position."""
    reuse = CollectiveReuse(model, max_deviation=None, estimate=False, tail_logits=2)
    alone = reuse.prefill_round(_round(0.05))
    together = reuse.prefill_round(_round(0.05), together=True)
    assert [p.stats.led for p in together.prefills] == [True, False, False]
    for a, b in zip(alone.prefills, together.prefills, strict=True):
        assert torch.equal(a.k, b.k) and torch.equal(a.v, b.v) and torch.equal(a.logits, b.logits)
        assert a.siblings == b.siblings and a.stats == b.stats
    # With a cached prefix (each prompt's first 8 tokens) the group runs only what follows it.
    prefixes = [PrefixKV(p.k[:, :8], p.v[:, :8]) for p in alone.prefills]
    alone = reuse.prefill_round(_round(0.05), prefixes=prefixes)
    together = reuse.prefill_round(_round(0.05), prefixes=prefixes, together=True)
    for a, b in zip(alone.prefills[1:], together.prefills[1:], strict=True):
        assert torch.equal(a.k, b.k) and torch.equal(a.logits, b.logits)
