"""bench dualpath's agent workload: turns, growth to the stated context, and the hit ratio it allows."""

import random

import pytest

from agentserve.bench.dualpath.workload import AgentWorkloadSpec, appends, generate, shape
from agentserve.bench.workloads.model import Session, Turn, Workload

pytestmark = pytest.mark.unit


def test_default_workload_is_the_issue_regime():
    spec = AgentWorkloadSpec()
    s = shape(generate(spec))
    assert s.agents == spec.agents == 32
    assert s.min_turns_per_agent == 30
    assert s.turns == 32 * 30
    assert s.max_context == s.min_final_context == 32768  # every agent ends exactly at the target
    assert s.hit_ratio >= 0.95


def test_every_agent_grows_turn_by_turn_to_the_final_context():
    spec = AgentWorkloadSpec(agents=3, turns=31, first_context=16384, final_context=65536, output_tokens=16, seed=7)
    w = generate(spec)
    for session in w.sessions:
        assert len(session.turns) == 31
        assert session.turns[0].new_tokens == 16384
        prompts, context = [], 0
        for t in session.turns:
            assert t.output_tokens == 16 and t.new_tokens >= 1 and t.reuse_tokens is None
            prompts.append(context + t.new_tokens)
            context = prompts[-1] + t.output_tokens
        assert prompts == sorted(prompts) and prompts[-1] == 65536


def test_appends_sum_exactly_to_the_growth_and_vary():
    spec = AgentWorkloadSpec(turns=30, first_context=1000, final_context=20000, output_tokens=10)
    out = appends(spec, random.Random(3))
    assert len(out) == 29
    assert sum(out) == 20000 - 1000 - 29 * 10
    assert min(out) >= 1 and len(set(out)) > 1


def test_shape_counts_prompt_and_reusable_tokens_exactly():
    # Prompts 100, 100+20+30=150; reusable 0 and 120: hit 120/250.
    turns = (Turn(output_tokens=20, new_tokens=100), Turn(output_tokens=20, new_tokens=30))
    s = shape(Workload("w", (Session("a", turns),)))
    assert (s.prompt_tokens, s.reusable_tokens, s.max_context) == (250, 120, 150)
    assert s.hit_ratio == pytest.approx(0.48)


def test_same_seed_same_workload():
    assert generate(AgentWorkloadSpec(seed=5)) == generate(AgentWorkloadSpec(seed=5))
    assert generate(AgentWorkloadSpec(seed=5)) != generate(AgentWorkloadSpec(seed=6))


@pytest.mark.parametrize(
    "kwargs, field",
    [
        ({"agents": 0}, "agents"),
        ({"turns": 1}, "turns"),
        ({"first_context": 1000, "final_context": 1100, "turns": 30, "output_tokens": 16}, "final_context"),
    ],
)
def test_bad_specs_name_the_field(kwargs, field):
    with pytest.raises(ValueError, match=field):
        AgentWorkloadSpec(**kwargs)
