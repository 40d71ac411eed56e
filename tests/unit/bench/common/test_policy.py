"""A cluster policy's settings as service flags, and what a build of the services cannot run."""

import pytest

from agentserve.bench.common.policy import Policy, effective, flags, unsupported
from agentserve.common.config import load_config
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
    # The check loads the config from the flags the cluster passes, as the service itself does.
    with pytest.raises(ValueError) as refused:
        load_config(SchedulerConfig, ["--prefill-policy", "no-such-policy"], env={})
    policy = Policy("p", "a bad prefill policy", scheduler={"prefill_policy": "no-such-policy"})
    assert unsupported(policy) == [f"scheduler: {refused.value}"]


def test_a_nested_config_field_is_a_setting_of_its_service() -> None:
    # time_dilation is the engines' EmulationConfig's, read unprefixed (--time-dilation).
    free = {"time_dilation": 0.0001, "compute": "emulated"}
    policy = Policy("floor", "free compute", prefill=free, decode=free)
    assert unsupported(policy) == []
    assert effective(policy, "prefill") == effective(policy, "decode") == free
    assert flags(effective(policy, "prefill")) == ["--time-dilation", "0.0001", "--compute", "emulated"]
