"""A cluster policy's settings as service flags, and what a build of the services cannot run."""

import pytest

from agentserve.bench.common.policy import Policy, effective, flags, unsupported
from agentserve.scheduler.config import SchedulerConfig

pytestmark = pytest.mark.unit


def test_settings_become_one_flag_per_config_field_with_lowercase_booleans() -> None:
    assert flags({"kv_path_policy": "split", "layerwise": True, "prefill_token_budget": 8192}) == [
        "--kv-path-policy",
        "split",
        "--layerwise",
        "true",
        "--prefill-token-budget",
        "8192",
    ]


def test_a_setting_no_service_config_has_makes_the_policy_unsupported_by_name() -> None:
    policy = Policy("p", "a made-up scheduler setting", scheduler={"no_such_setting": 3})
    assert unsupported(policy) == ["scheduler has no setting no_such_setting=3 in this build"]
    assert effective(policy, "scheduler") == {}


def test_an_implicit_value_is_what_a_service_without_the_setting_does() -> None:
    policy = Policy("p", "the implicit relay", scheduler={"relay_policy": "turn-decode"})
    assert unsupported(policy) == []


def test_a_value_the_service_config_refuses_is_named_with_its_service() -> None:
    with pytest.raises(ValueError) as refused:
        SchedulerConfig(prefill_policy="no-such-policy")
    policy = Policy("p", "a bad prefill policy", scheduler={"prefill_policy": "no-such-policy"})
    assert unsupported(policy) == [f"scheduler: {refused.value}"]
