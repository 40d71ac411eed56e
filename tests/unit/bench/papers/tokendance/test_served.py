"""bench tokendance's served capacity: the KV ledger's evictions and each policy's accounting of a
real run on the tiny model (latencies are measured, so the SLO is set where it cannot bind)."""

from __future__ import annotations

import math
from dataclasses import replace

import pytest

from agentserve.bench.papers.tokendance.served import (
    KVLedger,
    Regime,
    RoundServer,
    ServedSpec,
    calibrate,
    served_capacity,
)
from agentserve.bench.papers.tokendance.workload import RoundShape, first_turn_tokens, rounds
from agentserve.engine.loader import load_model

pytestmark = pytest.mark.unit

SHAPE = RoundShape("t", agents=3, rounds=2, first_tokens=10, private_tokens=4, output_tokens=8, order="rotated")
UNBOUNDED = math.inf


@pytest.fixture(scope="module")
def model(tiny_model_dir):
    return load_model(tiny_model_dir)[0]


def test_the_ledger_evicts_the_most_recently_served_first_and_never_what_cannot_fit() -> None:
    ledger = KVLedger(100, agents=4)
    assert [ledger.admit(a, 30) for a in range(3)] == [[], [], []]
    assert ledger.admit(3, 30) == [2]  # agent 2 is used again after 3, 0 and 1: furthest in the future
    assert ledger.admit(0, 40) == []  # its own old context is replaced, not added to
    assert ledger.admit(1, 45) == [0]  # (1 - 0) % 4 = 1 before (1 - 3) % 4 = 2
    assert sorted(ledger.resident) == [1, 3] and ledger.used == 75 and ledger.evictions == 2
    ledger.fixed = 80
    assert ledger.admit(2, 30) == [2] and not ledger.holds(2) and ledger.evictions == 2


def test_prefix_caching_computes_each_round_after_the_cached_history(model) -> None:
    probe = RoundServer(model, SHAPE, "prefix", ServedSpec(), UNBOUNDED).serve(UNBOUNDED)
    new = SHAPE.output_tokens + SHAPE.private_tokens + SHAPE.agents * SHAPE.output_tokens  # 36: no block is a hit
    assert probe.met and [r.round_index for r in probe.rounds] == [1, 2]
    assert [r.computed_tokens for r in probe.rounds] == [3 * new, 3 * new]
    assert [r.recomputed_history_tokens for r in probe.rounds] == [0, 0]
    assert [r.agents_served for r in probe.rounds] == [3, 3]
    assert [r.kv_tokens for r in probe.rounds] == [
        sum(a.prompt_tokens + SHAPE.output_tokens for a in agents) for agents in rounds(SHAPE)
    ]


def test_collective_holds_private_tokens_in_full_and_gathered_ones_at_the_diff_share(model) -> None:
    spec = ServedSpec(diff_share=0.5, recompute_fraction=0.15)
    probe = RoundServer(model, SHAPE, "collective", spec, UNBOUNDED).serve(UNBOUNDED)
    gathered = SHAPE.agents * SHAPE.output_tokens
    for r, (served, agents) in enumerate(zip(probe.rounds, rounds(SHAPE), strict=True), start=1):
        shared = r * gathered  # each agent holds every round's gathered blocks so far
        private = sum(a.prompt_tokens + SHAPE.output_tokens - shared for a in agents)
        assert served.kv_tokens == private + 3 * shared * 0.5 + r * gathered  # + every round's masters
        # The leader computes its new tokens in full; the others their own tokens and 2 of each
        # 8-token block (ceil(0.15 * 8)), plus the last token when it is not among its block's two.
        own = SHAPE.output_tokens + SHAPE.private_tokens
        assert 36 + 2 * (own + 6) <= served.computed_tokens <= 36 + 2 * (own + 7)


def test_an_evicted_history_is_computed_again(model) -> None:
    first = first_turn_tokens(SHAPE)
    (r1, _) = rounds(SHAPE)
    # Room for every context of round 1 but one token: serving the last agent evicts agent 1 (the
    # most recently served before it), whose whole round-1 prompt is computed again in round 2.
    budget = sum(a.prompt_tokens + SHAPE.output_tokens for a in r1) - 1
    probe = RoundServer(model, SHAPE, "prefix", ServedSpec(), budget).serve(UNBOUNDED)
    assert probe.rounds[0].evictions == 1 and probe.rounds[0].recomputed_history_tokens == 0
    assert probe.rounds[0].kv_tokens == budget + 1 - (r1[1].prompt_tokens + SHAPE.output_tokens)
    assert probe.rounds[1].recomputed_history_tokens >= r1[1].prompt_tokens > first[1]
    assert probe.rounds[1].computed_tokens >= 3 * 36 + r1[1].prompt_tokens


def test_a_round_stops_at_the_first_agent_past_the_slo(model) -> None:
    probe = RoundServer(model, SHAPE, "prefix", ServedSpec(), UNBOUNDED).serve(1e-9)
    assert not probe.met and len(probe.rounds) == 1
    assert probe.rounds[0].agents_served == 1 and probe.rounds[0].latency_s > 0


def test_calibration_sets_the_slo_and_budget_from_prefix_caching_fully_resident(model) -> None:
    spec = ServedSpec()
    calibration = calibrate(model, SHAPE, spec)
    probe = calibration.probe
    assert probe.met and probe.agents == SHAPE.agents and not any(r.evictions for r in probe.rounds)
    scaled = SHAPE.scaled(spec.token_scale)  # calibrate serves at the spec's token scale
    full = sum(a.prompt_tokens + scaled.output_tokens for a in rounds(scaled)[-1])
    assert calibration.slo_s == probe.worst_latency_s and calibration.full_kv_tokens == full
    # The default budget holds half of it, the same SLO at every budget.
    assert calibration.regime(spec, 0.5) == Regime(probe.worst_latency_s, round(0.5 * full, 1), True, 0.5)
    assert calibration.regime(spec, 1.0) == Regime(probe.worst_latency_s, full, True, 1.0)
    given = ServedSpec(slo_s=5.0, budget_tokens=1e6)
    assert calibration.regime(given, 0.5) == Regime(5.0, 1e6, False, None)


def test_the_calibration_probe_stands_for_prefix_caching_only_where_the_budget_held_it(model) -> None:
    calibration = calibrate(model, SHAPE, ServedSpec())
    full = calibration.regime(ServedSpec(), 1.0)
    assert calibration.known(full) == calibration.probe  # nothing it kept would be evicted
    assert calibration.known(calibration.regime(ServedSpec(), 0.5)) is None  # it would have evicted: serve again
    assert calibration.known(replace(full, slo_s=calibration.slo_s / 2)).met is False


def test_a_budget_sweep_measures_every_policy_at_each_fraction_and_heads_with_the_default(model) -> None:
    from agentserve.bench.papers.tokendance.bench import BenchSpec, _served
    from agentserve.bench.papers.tokendance.report import _served_markdown

    one_round = replace(SHAPE, rounds=1)
    # An SLO nothing reaches: every search ends at the largest count probed, 4 x the workload's 3.
    served = ServedSpec(slo_s=1e9, budget_sweep=(1.0, 0.5, 0.25))
    result = _served(BenchSpec(served=served), one_round, {"diff_share": 0.5}, model, lambda _: None)
    scaled = one_round.scaled(served.token_scale)
    full = sum(a.prompt_tokens + scaled.output_tokens for a in rounds(scaled)[-1])
    assert result["full_kv_tokens"] == full
    assert [p["budget_fraction"] for p in result["budget_sweep"]] == [1.0, 0.5, 0.25]
    assert [p["budget_tokens"] for p in result["budget_sweep"]] == [full, round(0.5 * full, 1), round(0.25 * full, 1)]
    for point in result["budget_sweep"]:
        assert point["max_agents"] == {"prefix": 12, "pic": 12, "collective": 12} and point["ratio"] == 1.0
        assert point["limited_by"] == {"prefix": "max probed", "pic": "max probed", "collective": "max probed"}
    assert result["regime"]["budget_fraction"] == 0.5 and result["regime"]["slo_s"] == 1e9
    assert result["regime"]["budget_rule"] == "0.5 x prefix caching's full-residency KV at the workload's agent count"
    # At half the budget prefix caching evicts already at the workload's 3 agents.
    probes = {p["agents"]: p for p in result["policies"]["prefix"]["probes"]}
    assert sum(r["evictions"] for r in probes[3]["rounds"]) > 0
    # At 12 agents even the first turns overflow it: round 1 computes evicted first turns again.
    assert sum(r["recomputed_history_tokens"] for r in probes[12]["rounds"]) > 0
    # The bound at the headline budget beside the measured counts, in the JSON and the report.
    bound = result["bound"]
    assert bound["max_agents"] == 12 and bound["limited_by"] == "max probed"  # the floor, as every policy here
    assert bound["concurrent_agents_ratio_bound"] == 1.0 and bound["memory_bound_agents"] < 12
    row = f"| t | 12 | {bound['memory_bound_agents']} | 12 | max probed | 1.0 | 1.0 |"
    assert row in _served_markdown({"t": result})


def test_a_search_where_nothing_binds_ends_at_the_largest_count_probed(model) -> None:
    one_round = replace(SHAPE, rounds=1)
    found = served_capacity(model, one_round, "collective", ServedSpec(), Regime(UNBOUNDED, UNBOUNDED, False))
    assert found.max_agents == 12 and found.limited_by == "max probed"  # 4 x the workload's 3 agents
    # Upward from the workload's 3 over GROWTH x 3 (rounded: 0.5 x 3 and 0.75 x 3 are both 2).
    assert sorted(p.agents for p in found.probes) == [3, 4, 6, 8, 9, 10, 12]


@pytest.mark.parametrize(
    ("field", "value", "message"),
    [
        ("token_scale", 0, "token_scale must be >= 1"),
        ("recompute_fraction", 1.0, r"recompute_fraction must be in \[0, 1\)"),
        ("slo_s", 0.0, "slo_s must be positive"),
        ("budget_tokens", -1.0, "budget_tokens must be positive"),
        ("diff_share", 1.5, r"diff_share must be in \[0, 1\]"),
        ("budget_fraction", 0.0, r"budget_fraction and budget_sweep must be in \(0, 1\], got 0.0"),
        ("budget_sweep", (1.0, 1.5), r"budget_fraction and budget_sweep must be in \(0, 1\], got 1.5"),
    ],
)
def test_bad_specs_are_refused_naming_the_field(field, value, message) -> None:
    with pytest.raises(ValueError, match=message):
        ServedSpec(**{field: value})


def test_the_served_regime_flags_reach_the_spec() -> None:
    import argparse

    from agentserve.bench.papers.tokendance.cli import add_arguments, bench_spec

    parser = argparse.ArgumentParser()
    add_arguments(parser)
    spec = bench_spec(parser.parse_args(["--served-token-scale", "8", "--served-slo-s", "2.5"]))
    assert spec.served == ServedSpec(token_scale=8, slo_s=2.5, budget_tokens=None)
    assert bench_spec(parser.parse_args([])).served == ServedSpec()
    assert ServedSpec().budget_fraction == 0.5 and ServedSpec().budget_fractions() == [0.5]
    swept = bench_spec(parser.parse_args(["--served-budget-sweep", "--served-budget-fraction", "0.3"])).served
    assert swept.budget_sweep == (1.0, 0.5, 0.25) and swept.budget_fractions() == [1.0, 0.5, 0.3, 0.25]


def test_a_sweep_over_fractions_is_refused_beside_a_budget_in_tokens() -> None:
    with pytest.raises(ValueError, match="budget_sweep is a sweep over fractions"):
        ServedSpec(budget_tokens=100.0, budget_sweep=(1.0, 0.5))
