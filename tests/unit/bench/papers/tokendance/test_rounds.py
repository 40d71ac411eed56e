"""bench tokendance's workloads and cost-model capacity: exact accounting on small shapes."""

from __future__ import annotations

from dataclasses import replace

import pytest

from agentserve.bench.papers.tokendance.capacity import CapacitySpec, RoundCosts, capacity
from agentserve.bench.papers.tokendance.workload import RoundShape, agent_society, first_turn_tokens, rounds
from agentserve.contracts.segments import SharedBlock

pytestmark = pytest.mark.unit

SHAPE = RoundShape("t", agents=3, rounds=2, first_tokens=10, private_tokens=4, output_tokens=5, order="rotated")


def test_rounds_grow_each_history_by_its_prompt_and_output() -> None:
    first = first_turn_tokens(SHAPE)
    (r1, r2) = rounds(SHAPE)
    assert [a.history_tokens for a in r1] == [n + 5 for n in first]
    assert [a.block_order for a in r1] == [(1, 2, 0), (2, 0, 1), (0, 1, 2)]
    assert all(a.shared_tokens == 15 and a.history_shared_tokens == 0 for a in r1)
    assert [a.history_tokens for a in r2] == [a.prompt_tokens + 5 for a in r1]
    assert all(a.history_shared_tokens == 15 and a.round_index == 2 for a in r2)


def test_shuffled_orders_are_permutations_that_differ_between_agents() -> None:
    (r1, *_) = rounds(replace(SHAPE, agents=8, order="shuffled"))
    assert all(sorted(a.block_order) == list(range(8)) for a in r1)
    assert len({a.block_order for a in r1}) == 8


def test_scaling_keeps_agents_and_rounds_and_at_least_one_token() -> None:
    assert agent_society().scaled(100) == RoundShape("agent-society", 64, 5, 5, 1, 1, "rotated")
    with pytest.raises(ValueError, match="token_scale must be >= 1"):
        SHAPE.scaled(0)


@pytest.mark.parametrize(
    ("field", "value", "message"),
    [
        ("agents", 0, "agents must be >= 1"),
        ("private_tokens", -1, "private_tokens must be >= 0"),
        ("order", "sorted", "order must be one of"),
    ],
)
def test_bad_shapes_are_refused_naming_the_field(field, value, message) -> None:
    with pytest.raises(ValueError, match=message):
        replace(SHAPE, **{field: value})


def test_round_costs_follow_the_formulas() -> None:
    spec = CapacitySpec(recompute_fraction=0.25, diff_share=0.5)
    costs = RoundCosts(spec)
    (r1, _) = rounds(SHAPE)
    a = r1[0]
    layers = costs.layers
    blend = costs.prefill(a.history_tokens, 19) / layers + costs.prefill(a.history_tokens + 11.25, 7.75) * (
        1 - 1 / layers
    )
    assert costs.blend_s(a) == pytest.approx(blend)
    assert costs.masters_s(a) == pytest.approx(3 * costs.prefill(0, 5))
    prefix = costs.round("prefix", r1, 15)
    each = [costs.prefill(x.history_tokens, 19) for x in r1]
    assert prefix.max_ttft_s == pytest.approx(sum(each)) and prefix.kv_tokens == sum(x.prompt_tokens + 5 for x in r1)
    collective = costs.round("collective", r1, 15)
    assert collective.max_ttft_s == pytest.approx(each[0] + sum(costs.blend_s(x) for x in r1[1:]))
    private = sum(x.prompt_tokens + 5 - 15 for x in r1)
    assert collective.kv_tokens == pytest.approx(private + 3 * 15 * 0.5 + 15)
    pic = costs.round("pic", r1, 15)
    assert pic.kv_tokens == prefix.kv_tokens + 15


def test_capacity_is_the_largest_agent_count_within_slo_and_budget() -> None:
    spec = CapacitySpec(slo_s=2.0, max_agents=64)
    shape_for = lambda n: replace(SHAPE, agents=n, first_tokens=1000, output_tokens=128)  # noqa: E731
    result = capacity(shape_for, spec, "prefix")
    costs = RoundCosts(spec)

    def worst(n: int) -> float:
        return max(costs.round("prefix", r, 0).max_ttft_s for r in rounds(shape_for(n)))

    assert worst(result.max_agents) <= 2.0 < worst(result.max_agents + 1)
    assert result.limited_by == "slo"
    assert capacity(shape_for, spec, "collective").max_agents > result.max_agents
    tight = replace(spec, slo_s=1e9, kv_gpus=1)
    assert capacity(shape_for, tight, "prefix").limited_by == "memory"


def test_blocks_of_a_shared_id_are_one_content() -> None:
    from agentserve.bench.papers.tokendance.engine_round import round_prompts
    from agentserve.contracts.segments import ReusePolicy

    (r1, _) = rounds(SHAPE)
    prompts = round_prompts(SHAPE, r1, ReusePolicy())
    by_id: dict[str, SharedBlock] = {}
    for prompt, agent in zip(prompts, r1, strict=True):
        spans = prompt.shared_spans()
        assert [s.block.content_id for s in spans] == [f"t/r1/agent{b}" for b in agent.block_order]
        assert len(prompt.token_ids) == agent.prompt_tokens
        for s in spans:
            assert by_id.setdefault(s.block.content_id, s.block) == s.block
