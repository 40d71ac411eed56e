"""bench dualpath's agent workload: turns, growth to the stated context, and the hit ratio it allows."""

import random

import pytest

from agentserve.bench.common.workloads.model import Session, Turn, Workload
from agentserve.bench.papers.dualpath.workload import AgentWorkloadSpec, appends, generate, late_turns, shape

pytestmark = pytest.mark.unit


def test_default_workload_is_the_issue_regime():
    spec = AgentWorkloadSpec()
    s = shape(generate(spec))
    assert s.agents == spec.agents == 16
    assert s.min_turns_per_agent == 30
    assert s.turns == 16 * 30
    assert s.max_context == s.min_final_context == 32768  # every agent ends exactly at the target
    assert s.hit_ratio >= 0.95


def test_every_agent_grows_turn_by_turn_to_the_final_context():
    spec = AgentWorkloadSpec(
        agents=3, turns=31, first_context=16384, final_context=65536, output_tokens=16, shared_prefix=0, seed=7
    )
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
    spec = AgentWorkloadSpec(turns=30, first_context=1000, final_context=20000, output_tokens=10, shared_prefix=0)
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
        ({"first_context": 1000, "final_context": 1100, "turns": 30, "shared_prefix": 0}, "final_context"),
        ({"first_context": 1000, "final_context": 9000, "shared_prefix": 1000}, "shared_prefix"),
    ],
)
def test_bad_specs_name_the_field(kwargs, field):
    with pytest.raises(ValueError, match=field):
        AgentWorkloadSpec(**kwargs)


def test_agents_share_a_cached_system_prompt():
    spec = AgentWorkloadSpec(agents=2, turns=30, first_context=16384, final_context=32768, shared_prefix=12288)
    w = generate(spec)
    assert w.prefixes == {"system": 12288}
    assert all(s.prefix == "system" and s.turns[0].new_tokens == 16384 - 12288 for s in w.sessions)
    s = shape(w)
    assert s.max_context == s.min_final_context == 32768  # the prefix counts toward the context
    # The first turn's 12288 shared tokens are reusable too.
    no_prefix = shape(generate(AgentWorkloadSpec(agents=2, shared_prefix=0)))
    assert s.reusable_tokens - no_prefix.reusable_tokens == 2 * 12288
    assert s.prompt_tokens == no_prefix.prompt_tokens


def test_prefill_pool_holds_about_one_context():
    from agentserve.bench.papers.dualpath.kv_pool import prefill_pool_tokens

    assert prefill_pool_tokens(1_200_000, 32768) == 40960  # 1.25 final contexts
    assert prefill_pool_tokens(30_000, 32768) == 30_000  # never above the target's pool


def test_decode_pool_holds_its_share_of_final_contexts():
    from agentserve.bench.papers.dualpath.kv_pool import decode_pool_tokens

    assert decode_pool_tokens(1_200_000, 32, 4, 32768) == 10 * 32768  # ceil(1.25 * 8) contexts
    assert decode_pool_tokens(1_200_000, 1024, 4, 32768) == 1_200_000
    assert decode_pool_tokens(1_200_000, 2, 4, 512) == 4 * 512  # a turn's output needs room past its prompt


def test_pool_plan_gives_each_role_whole_blocks_within_the_target():
    from agentserve.bench.papers.dualpath.kv_pool import plan

    pools = plan("deepseek-v3.2", "h800", 64, agents=16, prefill=2, decoders=4, final_context=32768)
    assert pools.target_pool_tokens % 64 == 0
    assert (pools.prefill_blocks, pools.decode_blocks) == (40960 // 64, 5 * 32768 // 64)
    assert plan("deepseek-v3.2", "h800", 64, 16, 2, 4, 32768, pool_tokens=100).prefill_blocks == 2
    with pytest.raises(ValueError, match="--kv-pool-tokens .* is outside what h800 holds for deepseek-v3.2"):
        plan("deepseek-v3.2", "h800", 64, 16, 2, 4, 32768, pool_tokens=10**9)


def test_online_agents_are_late_turns_of_the_offline_trajectories():
    offline = AgentWorkloadSpec(agents=4)  # 30 turns, 16K to 32K, ~549-token appends
    online = late_turns(offline, agents=10, turns=5)
    assert (online.agents, online.turns, online.final_context) == (10, 5, 32768)
    # Each turn grows the context as an offline turn does on average: 4 appends of ~549 + 16.
    assert online.first_context == 32768 - round(4 * (offline.mean_append + 16)) == 30508
    assert online.first_context - online.shared_prefix == round(offline.mean_append) == 549
    s = shape(generate(online))
    assert s.min_turns_per_agent == 5 and s.max_context == s.min_final_context == 32768
    assert s.hit_ratio >= 0.98  # every turn reads ~30K cached tokens and adds ~550
    assert late_turns(offline, agents=3, turns=30) == AgentWorkloadSpec(agents=3, seed=1)


def test_agents_under_different_labels_differ_only_by_id():
    spec = AgentWorkloadSpec(
        agents=2, turns=3, first_context=256, final_context=512, output_tokens=4, shared_prefix=128
    )
    a, b = generate(spec), generate(spec, label="probe1-agent")
    assert [s.id for s in b.sessions] == ["probe1-agent0000", "probe1-agent0001"]
    assert [s.turns for s in a.sessions] == [s.turns for s in b.sessions]
