"""A lifecycle policy's entry in `bench agentaware`'s JSON."""

import pytest

from agentserve.bench.papers.agentaware.runs import PolicyRuns
from agentserve.bench.papers.agentaware.stacks import lifecycle_policy

pytestmark = pytest.mark.unit


def test_a_policys_entry_keys_its_runs_by_rate_as_text_and_rounds_its_wall_time() -> None:
    policy = lifecycle_policy("lru")
    runs = PolicyRuns(policy, by_rate={0.05: {"jobs_done": 4}, 0.1: {"jobs_done": 8}}, wall_s=301.26)
    assert runs.to_json() == {
        "settings": policy.to_dict(),
        "unavailable": None,
        "wall_s": 301.3,
        "runs": {"0.05": {"jobs_done": 4}, "0.1": {"jobs_done": 8}},
    }


def test_a_policy_this_build_cannot_run_says_why_and_has_no_runs() -> None:
    policy = lifecycle_policy("agentserve")
    runs = PolicyRuns(policy, unavailable=["scheduler has no setting kv_offload=demote in this build"])
    assert runs.to_json() == {
        "settings": policy.to_dict(),
        "unavailable": ["scheduler has no setting kv_offload=demote in this build"],
        "wall_s": 0.0,
        "runs": {},
    }
