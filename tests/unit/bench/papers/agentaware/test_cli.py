"""bench agentaware's arguments -> bench spec (pools as kv_blocks, engines emulated, policies from
the scheduler's registry with lru first) and the KV budget stated beside the working set."""

import argparse

import pytest

from agentserve.bench.papers.agentaware import cli_args
from agentserve.bench.papers.agentaware.bench import BenchSpec, policy_names
from agentserve.bench.papers.agentaware.cli import bench_spec, kv_budget
from agentserve.scheduler.kv_lifecycle import LIFECYCLE_POLICIES

pytestmark = pytest.mark.unit


def parse(*argv: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    cli_args.add_arguments(parser)
    return parser.parse_args(list(argv))


def test_default_spec():
    spec = bench_spec(parse())
    assert spec.rates == (0.2, 0.3, 0.6)
    assert spec.cluster.prefill_kv_blocks == spec.cluster.decode_kv_blocks == 16384 // 64
    assert spec.cluster.compute.mode == "emulated"
    assert spec.cluster.compute.emulation.time_dilation == 0.5
    assert spec.cluster.engine_flags("decode") == {"block_size": 64, "kv_blocks": 16384 // 64}
    assert (spec.workload.jobs, spec.workload.width, spec.workload.rounds) == (10, 5, 2)
    assert spec.workload.output_tokens == 32 and spec.workload.prediction == "median"
    assert spec.chosen[0] == "lru" and set(spec.chosen) == set(LIFECYCLE_POLICIES) == set(policy_names())


def test_pool_rounds_up_to_whole_blocks_and_a_subset_keeps_the_baseline_first():
    spec = bench_spec(parse("--kv-pool-tokens", "1000", "--policies", "agentserve"))
    assert spec.cluster.prefill_kv_blocks == 16
    assert spec.chosen == ("lru", "agentserve")


@pytest.mark.parametrize(
    "argv, message",
    [
        (("--rates", "0.4,0.8"), "rates must be three positive"),
        (("--rates", "a,b,c"), "--rates takes comma-separated numbers"),
        (("--policies", "vllm"), "unknown policies"),
        (("--kv-pool-tokens", "10"), "--kv-pool-tokens must hold at least one block"),
        (("--time-dilation", "0"), "time_dilation must be"),
    ],
)
def test_bad_arguments_name_the_setting(argv, message):
    with pytest.raises(ValueError, match=message):
        bench_spec(parse(*argv))


def test_kv_budget_states_pools_beside_the_working_set():
    result = {
        "compared_at_rate_jobs_per_s": 0.8,
        "regime": {
            "workload_shape": {"jobs": 4, "final_context_tokens_total": 40000},
            "cluster": {"decode_engines": 2, "prefill_engines": 1},
            "kv_pool_tokens_per_engine": 5000,
        },
        "policies": {"lru": {"runs": {"0.8": {"duration_s": 20.0, "job_latencies_s": [10.0, 10.0, 20.0, 20.0]}}}},
    }
    assert kv_budget(result) == {
        "decode_pool_tokens_total": 10000,
        "prefill_pool_tokens_total": 5000,
        "working_set_tokens_per_job": 10000,
        "working_set_tokens_all_jobs": 40000,
        "jobs_whose_working_set_fits_decode_pools": 1.0,
        "lru_jobs_in_system_mean_at_middle_rate": 3.0,
        "lru_live_working_set_tokens_at_middle_rate": 30000,
    }


def test_bench_spec_refuses_unknown_policies_directly():
    spec = bench_spec(parse())
    with pytest.raises(ValueError, match="unknown policies"):
        BenchSpec(spec.workload, spec.cluster, spec.trace, spec.rates, 0.5, 1, policies=("nope",))
