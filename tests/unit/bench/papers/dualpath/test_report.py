"""bench dualpath's figures: per-run metrics from a replay summary, the must-show ratios and their
verdicts, what limits a missed target, policy settings as flags, and the Markdown report."""

import argparse
from pathlib import Path

import pytest

from agentserve.bench.common.policy import IMPLICIT, flags, unsupported
from agentserve.bench.papers.dualpath import limits, ratios, regime
from agentserve.bench.papers.dualpath.bench import BenchSpec
from agentserve.bench.papers.dualpath.metrics import nic_figures, run_figures
from agentserve.bench.papers.dualpath.policies import REGIME_PREFILL, policies
from agentserve.bench.papers.dualpath.report import markdown
from agentserve.bench.papers.dualpath.runs import PolicyResult
from agentserve.bench.papers.dualpath.workload import AgentWorkloadSpec, generate, late_turns
from agentserve.engine.emulation_config import EmulationConfig
from agentserve.fabric.profiles import load_profile
from tests.support.golden import matches_golden

pytestmark = pytest.mark.unit

GOLDEN = Path(__file__).parent / "golden" / "report.md"


def summary(
    duration_s: float, tpot_ms: float, snic: dict[str, tuple[float, int]], failed: int = 0, itl_ms: float = 40.0
) -> dict:
    """A replay summary with what run_figures reads; `snic`: engine -> (busy share, bytes)."""
    return {
        "duration_s": duration_s,
        "turns_total": 60,
        "turns_ok": 60 - failed,
        "turns_failed": failed,
        "failures": {},
        "throughput": {
            "turns_per_s": (60 - failed) / duration_s,
            "prompt_tokens_per_s": 1.0,
            "computed_prompt_tokens_per_s": 1.0,
            "output_tokens_per_s": 1.0,
        },
        "hit_ratio": 0.95,
        "ttft_p50_ms": 100.0,
        "ttft_p90_ms": 200.0,
        "tpot_p50_ms": tpot_ms,
        "tpot_p90_ms": tpot_ms,
        "itl_p50_ms": itl_ms,
        "itl_p90_ms": itl_ms,
        "session_completion_s": {},
        "engines": {},
        "nic_utilization": {
            "per_nic": {f"{e}/snic": u for e, (u, _) in snic.items()} | {f"{e}/cnic": 0.1 for e in snic},
            "bytes_per_nic": {f"{e}/snic": b for e, (_, b) in snic.items()} | {f"{e}/cnic": 7 for e in snic},
        },
    }


BALANCED = {"prefill-0": (0.5, 10**9), "prefill-1": (0.5, 10**9), "decode-0": (0.5, 10**9), "decode-1": (0.6, 10**9)}
PREFILL_BOUND = {
    "prefill-0": (0.95, 2 * 10**9),
    "prefill-1": (0.9, 2 * 10**9),
    "decode-0": (0.0, 0),
    "decode-1": (0.0, 0),
}


def test_nic_figures_are_snic_only_and_per_role():
    f = nic_figures(summary(10.0, 50.0, BALANCED)["nic_utilization"], "snic", 10.0)
    assert f["utilization"] == {"prefill-0": 0.5, "prefill-1": 0.5, "decode-0": 0.5, "decode-1": 0.6}
    assert f["max_over_avg"] == pytest.approx(0.6 / 0.525)
    prefill = f["bytes_by_role"]["prefill"]
    assert prefill["engines"] == 2 and prefill["bytes"] == 2 * 10**9
    assert prefill["gbps"] == pytest.approx(1.6)  # 2 GB in 10 s
    assert prefill["gbps_when_busy"] == pytest.approx(3.2)  # each moved 0.8 Gbps over half the run


def offline_figures() -> dict:
    return {
        "baseline": run_figures(summary(100.0, 50.0, PREFILL_BOUND)),
        "layerwise": run_figures(summary(80.0, 50.0, PREFILL_BOUND)),
        "dualpath": run_figures(summary(50.0, 51.0, BALANCED)),
        "dualpath-split": run_figures(summary(40.0, 51.0, BALANCED)),
    }


def probe(load: float, meets_slo: bool, tpot_ms: float) -> dict:
    return {"load": load, "meets_slo": meets_slo, "tpot_p90_ms": tpot_ms}


# Both met the SLO at 0.2 and 0.4 agents/s; only dualpath at 0.8.
PROBES = {
    "baseline": [probe(0.2, True, 50.0), probe(0.4, True, 52.0), probe(0.8, False, 60.0)],
    "dualpath": [probe(0.2, True, 51.0), probe(0.4, True, 53.56), probe(0.8, True, 58.0)],
}


def test_must_show_ratios_from_jct_capacity_snic_and_tpot():
    figures = ratios.must_show(offline_figures(), {"baseline": 1.0, "dualpath": 2.0}, PROBES)
    assert figures == {
        "offline_throughput_ratio": 2.0,
        "split_throughput_ratio": 2.5,
        "layerwise_jct_reduction": pytest.approx(0.2),
        "dualpath_jct_reduction_over_layerwise": pytest.approx(0.375),
        "online_capacity_ratio": 2.0,
        "snic_max_over_avg": pytest.approx(0.6 / 0.525),
        "tpot_p90_ratio": pytest.approx(1.03),  # at 0.4 agents/s, the highest load both met the SLO at
        "tpot_p90_ratio_offline": pytest.approx(1.02),
    }
    v = ratios.verdicts(figures)
    assert {k: x["met"] for k, x in v.items()} == {
        "offline_throughput_ratio": True,
        "split_throughput_ratio": True,
        "layerwise_jct_reduction": True,
        "dualpath_jct_reduction_over_layerwise": True,
        "online_capacity_ratio": True,
        "snic_max_over_avg": False,  # 1.143 > 1.1
        "tpot_p90_ratio": True,
    }
    assert v["split_throughput_ratio"]["target_value"] == 2.0  # bound by the offline ratio itself
    assert "tpot_p90_ratio_offline" not in v  # printed beside the targets, none of its own


def test_tpot_is_compared_at_each_load_both_policies_met_the_slo_at():
    equal = ratios.equal_load_tpot(PROBES)
    assert equal is not None
    assert equal["agents_per_s"] == 0.4
    assert [p["agents_per_s"] for p in equal["per_load"]] == [0.2, 0.4]
    assert [p["ratio"] for p in equal["per_load"]] == [pytest.approx(1.02), pytest.approx(1.03)]
    # No load both met the SLO at (the baseline failed its only one): no figure.
    assert ratios.equal_load_tpot({"baseline": [probe(0.2, False, 50.0)], "dualpath": [probe(0.2, True, 40.0)]}) is None
    assert ratios.equal_load_tpot({}) is None


def test_a_run_that_lost_turns_gives_no_ratio():
    offline = offline_figures()
    offline["dualpath"] = run_figures(summary(50.0, 51.0, BALANCED, failed=3))
    figures = ratios.must_show(offline, {})
    assert figures["offline_throughput_ratio"] is None
    assert figures["dualpath_jct_reduction_over_layerwise"] is None
    assert figures["online_capacity_ratio"] is None
    assert ratios.verdicts(figures)["offline_throughput_ratio"]["met"] is None


def results(offline: dict) -> dict:
    catalogue = policies()
    return {n: PolicyResult(catalogue[n], offline=f) for n, f in offline.items()}


def test_limits_name_the_unsaturated_side_and_the_measured_ceilings():
    offline = offline_figures()
    offline["baseline"] = run_figures(summary(60.0, 50.0, BALANCED))
    offline["layerwise"] = run_figures(summary(80.0, 50.0, BALANCED))  # path A at most half busy
    figures = ratios.must_show(offline, {})
    out = limits.explain(ratios.verdicts(figures), results(offline), None, BenchSpec())
    by_key = {x["key"]: x for x in out}
    # 60 s baseline, 80 s layerwise: layerwise misses too.
    assert set(by_key) == {
        "offline_throughput_ratio",
        "layerwise_jct_reduction",
        "online_capacity_ratio",
        "snic_max_over_avg",
        "tpot_p90_ratio",  # measured online only
    }
    reasons = by_key["offline_throughput_ratio"]["limited_by"]
    assert reasons[0] == (
        "the layerwise run's prefill storage NICs (path A) were busy at most 0.50 of its run: path A was not the "
        "bottleneck, so overlapping or adding reads has little to gain"
    )
    # dualpath: 1 GB an engine in 50 s = 0.16 Gbps, busy 0.5 (0.6 for decode-1) of the run.
    assert "prefill 0.64, decode 0.59; moved under dualpath: prefill 0.32, decode 0.32" in reasons[1]
    assert by_key["online_capacity_ratio"]["limited_by"] == ["no online capacity search in this invocation"]
    assert by_key["tpot_p90_ratio"]["limited_by"] == ["no online capacity search in this invocation"]
    assert "decode-1 0.60" in by_key["snic_max_over_avg"]["limited_by"][0]


def test_limits_name_a_policy_this_build_cannot_run():
    r = results(offline_figures())
    r["layerwise"] = PolicyResult(policies()["layerwise"], unavailable=["prefill has no setting layerwise=True"])
    offline = {n: x.offline for n, x in r.items()}
    figures = ratios.must_show(offline, {"baseline": 1.0, "dualpath": 2.0})
    out = {x["key"]: x for x in limits.explain(ratios.verdicts(figures), r, None, BenchSpec())}
    assert out["layerwise_jct_reduction"]["limited_by"] == ["layerwise: prefill has no setting layerwise=True"]


def test_policy_settings_become_service_flags():
    assert flags({"kv_path_policy": "split", "layerwise": True, "prefill_token_budget": 8192}) == [
        "--kv-path-policy",
        "split",
        "--layerwise",
        "true",
        "--prefill-token-budget",
        "8192",
    ]
    base = policies()["baseline"]
    assert base.scheduler["kv_path_policy"] == "always-a"
    # The baseline's own settings are the services' behaviour without them; the regime's (no
    # session KV kept between turns) are every policy's, the baseline's included.
    assert unsupported(base) == []
    assert {(k, v) for k, v in base.prefill.items() if k not in REGIME_PREFILL} <= IMPLICIT
    for policy in policies().values():
        assert policy.scheduler["session_kv"] == "store" and policy.prefill["keep_kv"] is False


def test_markdown_states_regime_targets_and_policies():
    offline = offline_figures()
    figures = ratios.must_show(offline, {"baseline": 1.0, "dualpath": 2.0})
    verdicts = ratios.verdicts(figures)
    spec = BenchSpec()
    result = {
        **figures,
        "targets": verdicts,
        "limits": limits.explain(verdicts, results(offline), None, spec),
        "regime": {
            "profile": "dualpath-h800",
            "profile_description": "8x H800",
            "compute": "emulated",
            "target_model": "deepseek-v3.2",
            "time_dilation": 2.0,
            "time_dilation_note": "local seconds per target second",
            "slo_target": "ttft_p90=4000ms",
            "cpu_floor": None,
            "cluster": spec.cluster.to_dict(),
            "workload": spec.workload.to_dict(),
            "workload_shape": {"hit_ratio": 0.958},
            "online": {
                "slo_local": "ttft_p90=8000ms",
                "duration_s": 30.0,
                "max_probes": 3,
                "turns_per_agent": 5,
                "workload": late_turns(spec.workload, 10, 5).to_dict(),
                "workload_shape": {"hit_ratio": 0.9826},
            },
            "policies_run": "at once, each on its own cluster",
        },
        "policies": {
            n: {"offline": f, "capacity": None, "unavailable": None, "settings": {}} for n, f in offline.items()
        },
        "cpu_floor": None,
        "wall_s": 12.0,
        "storage_regime": {
            "modelled": regime.modelled(
                generate(AgentWorkloadSpec(agents=8, first_context=20480, shared_prefix=16384)),
                EmulationConfig().cost(),
                load_profile("dualpath-h800"),
                2,
                4,
            ),
            "measured": regime.measured(limits.storage_sides(results(offline))),
        },
    }
    targets = {k: (v["value"], v["met"]) for k, v in verdicts.items()}
    assert (targets["offline_throughput_ratio"], targets["snic_max_over_avg"]) == (
        (2.0, True),
        (pytest.approx(8 / 7), False),
    )
    assert matches_golden(markdown(result), GOLDEN)


def test_sweep_points_and_table():
    from agentserve.bench.papers.dualpath.sweep import sweep_markdown, sweep_points

    assert sweep_points(16) == [
        ("agents", 64, 32768),
        ("agents", 256, 32768),
        ("agents", 1024, 32768),
        ("final_context", 16, 32768),
        ("final_context", 16, 65536),
        ("final_context", 16, 131072),
    ]
    assert sweep_points(4, (4, 8), (8192,)) == [("agents", 4, 8192), ("agents", 8, 8192), ("final_context", 4, 8192)]
    from agentserve.bench.papers.dualpath.cli_args import counts

    assert counts("4, 8") == (4, 8)
    for bad in ("", "4,x", "0,8"):
        with pytest.raises(argparse.ArgumentTypeError, match="comma-separated positive integers"):
            counts(bad)
    point = {
        "agents": 64,
        "final_context": 32768,
        "jct_s": {"baseline": 100.0, "layerwise": 80.0, "dualpath": 50.0, "dualpath-split": None},
        "offline_throughput_ratio": 2.0,
        "split_throughput_ratio": None,
    }
    assert sweep_markdown([point]).splitlines()[-1] == "| 64 | 32,768 | 100.0 | 80.0 | 50.0 | — | 2.00 | — |"


def test_each_sweep_point_gets_pools_for_its_context_and_agents():
    import argparse

    from agentserve.bench.papers.dualpath import cli_args
    from agentserve.bench.papers.dualpath.cli import bench_spec, with_pools

    parser = argparse.ArgumentParser()
    cli_args.add_arguments(parser)
    args = parser.parse_args([])
    base = bench_spec(args)
    # 1.25 contexts of 32K; the prefill's load order rides along
    prefill = {"block_size": 256, "kv_blocks": 40960 // 256, "load_order": "concurrent"}
    assert base.cluster.engine_flags("prefill") == prefill
    assert base.cluster.engine_flags("decode") == {"block_size": 256, "kv_blocks": 4 * 32768 // 256}
    point = with_pools(base, args, agents=64, final_context=131072)
    assert point.cluster.prefill_kv_blocks == 163840 // 256 and point.cluster.load_order == "concurrent"
    # ceil(1.25 * 64 / 4) = 20 contexts of 128K are more than the target's HBM: capped at all of it.
    assert point.cluster.decode_kv_blocks == 4578 and 4578 * 256 < 20 * 131072
    assert point.regime["kv_pool"]["prefill_pool_tokens_per_engine"] == 163840


def _phases(jct: float, compute: float, snic_busy: float, layer_wait: float) -> dict:
    """`phases.breakdown`'s `turn_phases` with what `limits` reads."""
    engines = {"prefill-0": {"compute_share": compute / jct, "layer_wait_share": layer_wait, "other_share": 0.0}}
    bounds = {"jct_s": jct, "prefill_compute_s": compute, "prefill_snic_s": snic_busy * jct, "agent_chain_s": 50.0}
    return {"client": {}, "scheduler": {}, "prefill": {}, "prefill_engines": engines, "bounds": bounds}


def test_a_missed_dualpath_gain_over_layerwise_names_both_bounds_and_the_reduction_they_allow():
    offline = offline_figures()
    offline["layerwise"] = run_figures(summary(100.0, 50.0, PREFILL_BOUND))
    offline["dualpath"] = run_figures(summary(95.0, 51.0, BALANCED))
    offline["layerwise"]["turn_phases"] = _phases(100.0, 80.0, 0.9, 0.15)  # reads 90 s, computes 80 s
    offline["dualpath"]["turn_phases"] = _phases(95.0, 81.0, 0.2, 0.05)
    figures = ratios.must_show(offline, {})
    by_key = {x["key"]: x for x in limits.explain(ratios.verdicts(figures), results(offline), None, BenchSpec())}
    reasons = by_key["dualpath_jct_reduction_over_layerwise"]["limited_by"]
    assert (
        "layerwise: JCT 100.0 s; bounds: prefill compute 80.0 s, prefill storage NIC 90.0 s, one agent's chain "
        "50.0 s; prefill engines computing up to 0.80 of the run, held by layer waits up to 0.15"
    ) in reasons
    assert reasons[-1] == (
        "were each at its largest bound (layerwise 90.0 s, dualpath 81.0 s), the reduction would be 0.100: "
        "layerwise overlaps its reads with compute, so dualpath can only gain where a turn reads longer than it "
        "computes"
    )


def test_a_missed_tpot_ratio_gives_each_equal_load_then_sets_dualpath_beside_layerwise_offline():
    offline = offline_figures()
    offline["baseline"] = run_figures(summary(120.0, 50.0, PREFILL_BOUND))
    offline["layerwise"] = run_figures(summary(60.0, 54.0, PREFILL_BOUND))
    offline["dualpath"] = run_figures(summary(60.0, 55.0, BALANCED, itl_ms=41.0))
    probes = {"baseline": [probe(0.2, True, 50.0)], "dualpath": [probe(0.2, True, 53.0), probe(0.4, True, 54.0)]}
    figures = ratios.must_show(offline, {}, probes)
    assert figures["tpot_p90_ratio"] == pytest.approx(1.06)
    assert figures["tpot_p90_ratio_offline"] == pytest.approx(1.1)
    runs = results(offline)
    for name, policy_probes in probes.items():
        runs[name].capacity = {"probes": policy_probes}
    by_key = {x["key"]: x for x in limits.explain(ratios.verdicts(figures), runs, None, BenchSpec())}
    assert by_key["tpot_p90_ratio"]["limited_by"] == [
        "TPOT p90 at the same online load, dualpath over the baseline: 0.20 agents/s 53.0 / 50.0 ms = 1.060",
        "offline TPOT p90 baseline 50.0 ms at 0.50 turns/s, layerwise 54.0 ms at 1.00 turns/s, "
        "dualpath 55.0 ms at 1.00 turns/s",
        "layerwise, which relays nothing, over the baseline 1.080; dualpath over layerwise 1.019: the share of the "
        "rise path B's relays could account for is the second",
        "ITL p90 (the gaps after the second token, the decode step's own pace) dualpath 41.0 ms over the "
        "baseline's 40.0: 1.025; the rest of TPOT is the first token's hand-off to the decode engine",
    ]
