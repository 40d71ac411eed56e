"""The capacity search: bisection on a monotone predicate, the P*(D) staircase, the consistency
check, and a whole plan on a small generated workload in the simulator."""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import pytest

from agentserve.plan.colocated import COLOCATED, STORE
from agentserve.plan.deployment import Point, Prices, Trial
from agentserve.plan.planner import PlanSpec, plan
from agentserve.plan.search import RESEED, Search, Space, lowest_passing

pytestmark = pytest.mark.unit


@pytest.mark.parametrize(("threshold", "lo", "hi"), [(1, 1, 1), (1, 1, 40), (17, 1, 40), (40, 1, 40), (5, 5, 9)])
def test_bisection_finds_the_least_passing_count_in_log_probes(threshold: int, lo: int, hi: int) -> None:
    probed: list[int] = []

    def passes(x: int) -> bool:
        probed.append(x)
        return x >= threshold

    assert lowest_passing(passes, lo, hi) == threshold
    assert len(probed) <= 1 + math.ceil(math.log2(hi - lo + 1))


def test_bisection_says_none_when_the_top_fails_or_the_range_is_empty() -> None:
    assert lowest_passing(lambda x: x >= 50, 1, 40) is None
    assert lowest_passing(lambda x: True, 5, 4) is None


@dataclass
class FakeEvaluator:
    """A monotone staircase: a point passes when P >= max(2, 12 - D) and D >= 3 (an extra decode engine
    saves a prefill engine down to P = 2). Cost: GPUs at 1/h. `flaky` pass at seed 0 only."""

    flaky: set[tuple[int, int]] = field(default_factory=set)
    trials: dict[tuple[Point, int], Trial] = field(default_factory=dict)
    colocated: dict[str, int] = field(default_factory=dict)  # lifecycle -> the fewest colocated engines passing

    def passes(self, p: int, d: int, seed: int) -> bool:
        if (p, d) in self.flaky:
            return seed == 0
        return d >= 3 and p >= max(2, 12 - d)

    def passes_point(self, point: Point, seed: int) -> bool:
        if point.colocated:
            return point.colocated >= self.colocated[point.lifecycle]
        return self.passes(point.prefill, point.decode, seed)

    def cost(self, point: Point) -> float:
        return float(point.gpus)

    def __call__(self, point: Point, seed: int = 0) -> Trial:
        key = (point, seed)
        if key not in self.trials:
            ok = self.passes_point(point, seed)
            binds = "tpot_p90" if point.decode < 3 else "ttft_later_p90"
            ratios = {"ttft_later_p90": 0.8 if ok else 1.5, "tpot_p90": 0.5 if point.decode >= 3 else 2.0}
            self.trials[key] = Trial(point, seed, 0.95 if ok else 0.5, ok, ratios, binds, {}, 0.0, self.cost(point))
        return self.trials[key]


def brute_force_cheapest(ev: FakeEvaluator, top: int = 30) -> int:
    return min(p + d for p in range(1, top) for d in range(1, top) if ev.passes(p, d, 0) and ev.passes(p, d, RESEED))


def test_the_staircase_walk_finds_the_cheapest_point_and_every_cheaper_one_tried_fails() -> None:
    ev = FakeEvaluator()
    search = Search(ev, Space(("dualpath",), (400.0,), 64), start=(1, 1))  # type: ignore[arg-type]
    search.run(("dualpath", 400.0))
    chosen, consistency = search.choose()
    assert chosen is not None and chosen.point.gpus == brute_force_cheapest(ev) == 12
    assert consistency["consistent"] and consistency["cheaper_points_all_fail"]
    cheaper = [t for (_, s), t in ev.trials.items() if s == 0 and t.cost_per_hour < chosen.cost_per_hour]
    assert cheaper and not any(t.meets_slo for t in cheaper)
    # far fewer points than the 64x64 grid
    assert len(ev.trials) < 40


def test_a_choice_that_fails_at_another_seed_is_rejected_and_the_search_moves_up() -> None:
    ev = FakeEvaluator(flaky={(2, 6)})  # cheaper than the true staircase (2 + 6 < 12), passes at seed 0 only
    search = Search(ev, Space(("dualpath",), (400.0,), 64), start=(2, 6))  # type: ignore[arg-type]
    search.run(("dualpath", 400.0))
    chosen, consistency = search.choose()
    assert chosen is not None and chosen.point.gpus > 8
    assert consistency["passed_seed0_failed_reseed"][0]["prefill_engines"] == 2
    flaky = ev.trials[(Point("dualpath", 400.0, 2, 6), 0)]
    assert flaky.verdict.startswith("passes at seed 0 but fails")
    assert consistency["consistent"]  # the rejected point is cheaper but was not chosen for a reason stated


def test_a_lifecycle_policy_on_colocated_engines_is_chosen_when_it_needs_fewer_gpus_than_any_pd_point() -> None:
    # Colocated engines pass from 9 under agentserve and from 14 under lru; the PD staircase's cheapest is 12.
    ev = FakeEvaluator(colocated={"agentserve": 9, "lru": 14})
    search = Search(ev, Space(("dualpath",), (400.0,), 64, ("lru", "agentserve")), start=(1, 1))  # type: ignore[arg-type]
    search.run(("dualpath", 400.0))
    chosen, consistency = search.choose()
    assert chosen is not None
    assert (chosen.point.policy, chosen.point.lifecycle, chosen.point.colocated) == (COLOCATED, "agentserve", 9)
    assert chosen.point.gpus == 9 and consistency["consistent"]
    # lru's family cannot beat the 12-GPU PD pass at 11 engines: one simulation, failing
    lru = [pt.colocated for (pt, s) in ev.trials if s == 0 and pt.lifecycle == "lru"]
    assert lru == [11]
    assert [n["colocated_engines"] for n in consistency["cheaper_neighbours_at_reseed"]] == [8]
    outcomes = {(f["policy"], f["lifecycle"]): f["points_simulated"] for f in search.families}
    assert set(outcomes) == {("dualpath", STORE), (COLOCATED, "lru"), (COLOCATED, "agentserve")}


def test_a_rejected_choice_raises_the_bound_and_colocated_families_are_searched_up_to_the_new_one() -> None:
    # 2P+6D passes at seed 0 only and sets the bound at 8 GPUs; colocated passes from 10 engines,
    # under the PD staircase's 12 once 2P+6D is rejected.
    ev = FakeEvaluator(flaky={(2, 6)}, colocated={"agentserve": 10})
    search = Search(ev, Space(("dualpath",), (400.0,), 64, ("agentserve",)), start=(2, 6))  # type: ignore[arg-type]
    search.run(("dualpath", 400.0))
    assert [pt.colocated for (pt, s) in ev.trials if pt.colocated] == [7]  # the most under 8 GPUs: fails
    chosen, consistency = search.choose()
    assert chosen is not None and (chosen.point.lifecycle, chosen.point.colocated) == ("agentserve", 10)
    assert consistency["consistent"]


def test_pd_points_keep_the_store_lifecycle_when_no_colocated_policy_passes_cheaper() -> None:
    ev = FakeEvaluator(colocated={"offload": 30})
    space = Space(("dualpath",), (200.0, 400.0), 64, ("offload",))
    search = Search(ev, space, start=(1, 1))  # type: ignore[arg-type]
    search.run(("dualpath", 400.0))
    chosen, _ = search.choose()
    assert chosen is not None and chosen.point.lifecycle == STORE and chosen.point.gpus == 12
    # 11 engines fail with 400 Gbps per node, so the 200 Gbps family is not simulated
    assert [(pt.snic_gbps, pt.colocated) for (pt, s) in ev.trials if s == 0 and pt.colocated] == [(400.0, 11)]
    narrow = next(f for f in search.families if f["lifecycle"] == "offload" and f["snic_gbps_per_node"] == 200.0)
    assert narrow["points_simulated"] == 0 and "wider storage NIC" in narrow["outcome"]


def test_a_plan_of_a_small_generated_workload_is_consistent_and_costed() -> None:
    spec = PlanSpec(
        workload="coding:sessions=12,turns=3,system=1024,first=2048,new=512,output=32,rate=0.5",
        slo="ttft_first_p90=2s,ttft_later_p90=1s,tpot_p90=100ms",
        snic_gbps=(200.0, 400.0),
        max_gpus=16,
        prices=Prices(2.0, 0.04),
        lifecycles=("lru", "agentserve"),
    )
    result = plan(spec)
    d = result["deployment"]
    assert d is not None and result["consistent"] is True
    assert result["consistency"]["chosen_at_reseed"]["meets_slo"]
    assert (d["policy"], d["lifecycle"]) in {(p, STORE) for p in ("baseline", "layerwise", "dualpath")} | {
        (COLOCATED, "lru"),
        (COLOCATED, "agentserve"),
    }
    assert d["snic_gbps_per_node"] in (200.0, 400.0)
    cost = result["cost"]
    assert cost["cost_per_hour"] == pytest.approx(d["gpus"] * 2.0 + d["nodes"] * d["snic_gbps_per_node"] / 100 * 0.04)
    for key in ("cost_per_million_tokens", "cost_per_agent_hour", "goodput_turns_per_s_per_gpu"):
        assert cost[key] > 0
    trace = result["search"]["trace"]
    families = {(f["policy"], f["lifecycle"], f["snic_gbps_per_node"]) for f in result["search"]["families"]}
    configurations = [(p, STORE) for p in ("baseline", "layerwise", "dualpath")]
    configurations += [(COLOCATED, "lru"), (COLOCATED, "agentserve")]
    assert families == {(p, life, g) for p, life in configurations for g in (200.0, 400.0)}
    assert {(t["policy"], t["lifecycle"], t["snic_gbps_per_node"]) for t in trace} <= families
    assert any(t["colocated_engines"] for t in trace)  # colocated points were simulated, not only listed
    assert all(t["verdict"] for t in trace)
    assert all(not t["meets_slo"] for t in trace if t["cost_per_hour"] < cost["cost_per_hour"])
