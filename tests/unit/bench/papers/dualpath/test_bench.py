"""How `bench dualpath` folds a capacity search run on a cluster of its own into its policy's result, and refuses
a search it could not run when it is specified."""

import pytest

from agentserve.bench.papers.dualpath.bench import RunKey, _merge_apart
from agentserve.bench.papers.dualpath.policies import policies
from agentserve.bench.papers.dualpath.runs import OnlineSpec, PolicyResult
from agentserve.bench.papers.dualpath.workload import AgentWorkloadSpec
from agentserve.bench.papers.replay.slo import SLO

pytestmark = pytest.mark.unit


def test_a_search_apart_is_folded_into_its_policy_with_its_clusters_phases():
    catalogue = policies()
    baseline = PolicyResult(catalogue["baseline"], offline={"jct_s": 500.0})
    baseline.phases_s = {"start": 15.0, "warm": 50.0, "offline": 500.0, "stop": 3.0}
    apart = PolicyResult(catalogue["baseline"], capacity={"capacity_agents_per_s": 0.4})
    apart.phases_s = {"start": 16.0, "warm": 90.0, "slot_wait": 200.0, "online": 480.0, "stop": 2.0}
    dualpath = PolicyResult(catalogue["dualpath"], offline={"jct_s": 300.0}, capacity={"capacity_agents_per_s": 0.8})
    merged = _merge_apart(
        {RunKey("baseline"): baseline, RunKey("baseline", search_apart=True): apart, RunKey("dualpath"): dualpath}
    )
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
    # Refused when the spec is made, before the offline half of the bench (minutes) runs.
    with pytest.raises(ValueError, match="at least 2 probes"):
        OnlineSpec(SLO.parse("ttft_p90=40s,tpot_p90=500ms"), max_probes=1)
    assert OnlineSpec(SLO.parse("ttft_p90=40s,tpot_p90=500ms"), max_probes=2).search_spec().max_probes == 2


def test_a_policys_json_entry_rounds_its_times_and_names_why_it_did_not_run():
    catalogue = policies()
    result = PolicyResult(catalogue["dualpath"], offline={"jct_s": 300.0}, capacity={"capacity_agents_per_s": 0.8})
    result.wall_s = 612.345
    result.phases_s = {"start": 15.04, "offline": 300.06}
    assert result.to_json() == {
        "settings": catalogue["dualpath"].to_dict(),
        "unavailable": None,
        "offline": {"jct_s": 300.0},
        "capacity": {"capacity_agents_per_s": 0.8},
        "wall_s": 612.3,
        "phases_s": {"start": 15.0, "offline": 300.1},
    }
    missing = PolicyResult(catalogue["layerwise"], unavailable=["prefill has no setting layerwise=True"])
    assert missing.to_json()["unavailable"] == ["prefill has no setting layerwise=True"]
    assert missing.to_json()["offline"] is None and missing.to_json()["phases_s"] == {}


def test_the_online_regime_states_the_search_and_the_workload_its_agents_run():
    offline = AgentWorkloadSpec(agents=4, turns=6)
    online = OnlineSpec(SLO.parse("ttft_p90=40s,tpot_p90=500ms"), duration_s=10.0, max_rate=0.4, turns=2)
    out = online.to_json(offline)
    assert {k: out[k] for k in out if k not in ("workload", "workload_shape")} == {
        "slo_local": "ttft_p90=40000ms,tpot_p90=500ms",
        "duration_s": 10.0,
        "start_agents_per_s": 0.1,
        "max_agents_per_s": 0.4,
        "max_probes": 4,
        "turns_per_agent": 2,
        "tolerance": 0.25,
        "agents_available": 7,  # ceil(0.4 * 10 * 1.5) + 1
    }
    assert out["workload"] == online.workload(offline).to_dict()
    assert out["workload"]["agents"] == 7 and out["workload"]["turns_per_agent"] == 2
    assert out["workload_shape"]["agents"] == 7 and out["workload_shape"]["turns"] == 7 * 2
