"""bench agentaware's policy stacks: each lifecycle policy's cluster gets exactly the agent-aware
pieces it claims; the baselines keep every service default."""

import pytest

from agentserve.bench.common.policy import effective, flags, unsupported
from agentserve.bench.papers.agentaware.stacks import CRITICAL_RESERVE, KV_COMMIT_RATIO, lifecycle_policy

pytestmark = pytest.mark.unit


@pytest.mark.parametrize("name", ["lru", "ttl-pin", "offload"])
def test_baselines_run_with_service_defaults(name):
    policy = lifecycle_policy(name)
    assert effective(policy, "scheduler") == {"kv_lifecycle": name}
    assert effective(policy, "prefill") == effective(policy, "decode") == {}
    assert unsupported(policy) == []


def test_agentserve_turns_on_hinted_pools_the_critical_reserve_and_kv_admission():
    policy = lifecycle_policy("agentserve")
    assert unsupported(policy) == []
    assert flags(effective(policy, "scheduler")) == [
        "--kv-lifecycle",
        "agentserve",
        "--kv-commit-ratio",
        "4.0",
        "--kv-offload",
        "demote",
    ]
    for service in ("prefill", "decode"):
        assert effective(policy, service) == {"eviction_policy": "hinted", "critical_reserve": CRITICAL_RESERVE}
    assert policy.description == (
        f"kv_lifecycle=agentserve; scheduler: kv_commit_ratio={KV_COMMIT_RATIO} kv_offload=demote; "
        f"prefill: critical_reserve={CRITICAL_RESERVE} eviction_policy=hinted; "
        f"decode: critical_reserve={CRITICAL_RESERVE} eviction_policy=hinted"
    )


def test_tokencake_partitions_its_pools_without_admission_and_bench_settings_apply_over_a_stack():
    policy = lifecycle_policy("tokencake", {"park_min_wait_s": 1.0})
    assert effective(policy, "scheduler") == {"kv_lifecycle": "tokencake", "park_min_wait_s": 1.0}
    assert effective(policy, "decode") == {"eviction_policy": "hinted", "critical_reserve": CRITICAL_RESERVE}
