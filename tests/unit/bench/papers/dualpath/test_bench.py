"""How `bench dualpath` folds a capacity search run on a cluster of its own into its policy's result, and refuses
a search it could not run when it is specified."""

import pytest

from agentserve.bench.papers.dualpath.bench import APART, _merge_apart
from agentserve.bench.papers.dualpath.policies import policies
from agentserve.bench.papers.dualpath.runs import OnlineSpec, PolicyResult
from agentserve.bench.papers.replay.slo import SLO

pytestmark = pytest.mark.unit


def test_a_search_apart_is_folded_into_its_policy_with_its_clusters_phases():
    catalogue = policies()
    baseline = PolicyResult(catalogue["baseline"], offline={"jct_s": 500.0})
    baseline.phases_s = {"start": 15.0, "warm": 50.0, "offline": 500.0, "stop": 3.0}
    apart = PolicyResult(catalogue["baseline"], capacity={"capacity_agents_per_s": 0.4})
    apart.phases_s = {"start": 16.0, "warm": 90.0, "slot_wait": 200.0, "online": 480.0, "stop": 2.0}
    dualpath = PolicyResult(catalogue["dualpath"], offline={"jct_s": 300.0}, capacity={"capacity_agents_per_s": 0.8})
    merged = _merge_apart({"baseline": baseline, "baseline" + APART: apart, "dualpath": dualpath})
    assert list(merged) == ["baseline", "dualpath"]
    assert merged["baseline"].capacity == {"capacity_agents_per_s": 0.4}
    assert merged["baseline"].offline == {"jct_s": 500.0}
    assert merged["baseline"].phases_s == {
        "start": 15.0,
        "warm": 50.0,
        "offline": 500.0,
        "stop": 3.0,
        "online_start": 16.0,
        "online_warm": 90.0,
        "online_slot_wait": 200.0,
        "online": 480.0,
        "online_stop": 2.0,
    }
    assert merged["dualpath"] is dualpath


def test_an_online_search_the_capacity_search_would_refuse_is_refused_when_specified():
    # --online-probes 1 used to run the offline half of the bench (minutes) before the search refused it.
    with pytest.raises(ValueError, match="at least 2 probes"):
        OnlineSpec(SLO.parse("ttft_p90=40s,tpot_p90=500ms"), max_probes=1)
    assert OnlineSpec(SLO.parse("ttft_p90=40s,tpot_p90=500ms"), max_probes=2).search_spec().max_probes == 2
