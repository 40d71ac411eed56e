"""`sim dualpath` end to end at a toy scale: the bench's keys, a bisected capacity, repeatable JSON."""

import json
from typing import Any

import pytest

from agentserve.bench.papers.dualpath.workload import AgentWorkloadSpec
from agentserve.sim.config import SimConfig
from agentserve.sim.dualpath import DualPathSimSpec, run_dualpath

WALL_CLOCK_KEYS = {"wall_s", "wall_clock"}


def _spec(**overrides: Any) -> DualPathSimSpec:
    return DualPathSimSpec(
        workload=AgentWorkloadSpec(
            agents=6, turns=3, first_context=8192, final_context=10240, output_tokens=4, shared_prefix=7680
        ),
        config=SimConfig(prefill_nodes=1, decode_nodes=1, gpus_per_node=2),
        online_duration_s=5.0,
        online_turns=2,
        online_start=2.0,
        online_tolerance=0.1,
        **overrides,
    )


def _without_wall_clock(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _without_wall_clock(v) for k, v in value.items() if k not in WALL_CLOCK_KEYS}
    if isinstance(value, list):
        return [_without_wall_clock(v) for v in value]
    return value


def test_the_result_has_bench_dualparths_keys_and_a_bisected_capacity() -> None:
    result = run_dualpath(_spec())
    for key in (
        "offline_throughput_ratio",
        "split_throughput_ratio",
        "layerwise_jct_reduction",
        "dualpath_jct_reduction_over_layerwise",
        "online_capacity_ratio",
        "snic_max_over_avg",
        "tpot_p90_ratio",
    ):
        assert key in result and key in result["targets"]
    assert set(result["policies"]) == {"baseline", "layerwise", "dualpath", "dualpath-split"}
    for name in ("baseline", "dualpath"):
        capacity = result["policies"][name]["capacity"]
        low, high = capacity["capacity_agents_per_s"], capacity["lowest_failing_agents_per_s"]
        assert low is not None and high is not None
        assert (high - low) / low <= 0.1  # bisected to the tolerance
        passed = [p["load"] for p in capacity["probes"] if p["meets_slo"]]
        assert max(passed) == low
        # each probe names the SLO term that binds; the capacity, the one at the lowest failing load
        assert all({t["term"] for t in p["slo_check"]["terms"]} == {"ttft_p90", "tpot_p90"} for p in capacity["probes"])
        failing = next(p for p in capacity["probes"] if p["load"] == high)
        assert capacity["binds"] == failing["binds"] in ("ttft_p90", "tpot_p90")
    assert result["online_capacity_ratio"] == pytest.approx(
        result["policies"]["dualpath"]["capacity"]["capacity_agents_per_s"]
        / result["policies"]["baseline"]["capacity"]["capacity_agents_per_s"]
    )


def test_one_seed_gives_identical_json_apart_from_wall_clock_keys() -> None:
    spec = _spec(policies=("baseline", "dualpath"))
    one, two = run_dualpath(spec), run_dualpath(spec)
    assert json.dumps(_without_wall_clock(one), sort_keys=True) == json.dumps(_without_wall_clock(two), sort_keys=True)


def test_the_capacity_takes_first_and_later_turn_slos_apart_and_names_the_binding_one() -> None:
    result = run_dualpath(
        _spec(
            policies=("baseline",),
            online_policies=("baseline",),
            slo="ttft_first_p90=4s,ttft_later_p90=2s,tpot_p90=50ms",
        )
    )
    capacity = result["policies"]["baseline"]["capacity"]
    terms = {"ttft_first_p90", "ttft_later_p90", "tpot_p90"}
    assert all({t["term"] for t in p["slo_check"]["terms"]} == terms for p in capacity["probes"])
    assert capacity["binds"] in terms
    # a probe passes only when every term holds at its own percentile over the turns it bounds
    for p in capacity["probes"]:
        assert p["meets_slo"] == (p["slo_check"]["meets"] and p["attainment"] >= 0.9)


def test_online_policies_must_be_among_those_run() -> None:
    with pytest.raises(ValueError, match="online policies"):
        _spec(policies=("layerwise",))


def test_the_sweep_runs_every_agent_count_at_every_maximum_length(tmp_path) -> None:
    from agentserve.sim.sweep import run_sweep, write_sweep

    swept = run_sweep(_spec(policies=("baseline", "dualpath")), agent_counts=(2, 4), contexts=(10240, 20480))
    points = [(p["agents"], p["final_context"]) for p in swept["points"]]
    assert points == [(2, 10240), (4, 10240), (2, 20480), (4, 20480)]
    for p in swept["points"]:
        assert set(p["jct_s"]) == {"baseline", "dualpath"}
        assert p["offline_throughput_ratio"] == pytest.approx(p["jct_s"]["baseline"] / p["jct_s"]["dualpath"])
        assert p["bounds"]["offline_ratio_bound"] > 0
    write_sweep(swept, tmp_path)
    assert (tmp_path / "sweep.png").is_file() and "| 4 | 20,480 |" in (tmp_path / "sweep.md").read_text()
