"""EngineServiceConfig: the emulated fabric's settings, from flags and environment."""

from __future__ import annotations

import pytest

from agentserve.common.config import load_config
from agentserve.decode.config import DecodeConfig
from agentserve.prefill.config import PrefillConfig

pytestmark = pytest.mark.unit


def test_fabric_defaults_and_env() -> None:
    assert (PrefillConfig().fabric_profile, PrefillConfig().fabric_prefill_tokens_per_s) == ("local-unshaped", 0.0)
    config = load_config(
        DecodeConfig, ["--fabric-prefill-tokens-per-s", "800"], env={"AGENTSERVE_FABRIC_PROFILE": "h800-node"}
    )
    assert (config.fabric_profile, config.fabric_prefill_tokens_per_s) == ("h800-node", 800.0)


@pytest.mark.parametrize(
    "fields, message",
    [
        (dict(fabric_profile=""), "fabric_profile must not be empty"),
        (dict(fabric_prefill_tokens_per_s=-1.0), "fabric_prefill_tokens_per_s must be >= 0"),
    ],
)
def test_bad_fabric_config(fields: dict, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        PrefillConfig(**fields)


def test_store_deadline_is_milliseconds_and_zero_means_none() -> None:
    assert load_config(PrefillConfig, ["--kvstore-timeout-ms", "2500"]).kvstore_timeout_ms == 2500
    assert PrefillConfig(kvstore_timeout_ms=0).kvstore_timeout_ms == 0
    with pytest.raises(ValueError, match=r"kvstore_timeout_ms must be >= 0 \(0: no deadline\), got -1"):
        PrefillConfig(kvstore_timeout_ms=-1)


def test_the_critical_share_is_a_flag_and_a_fraction_of_the_pool() -> None:
    assert DecodeConfig().critical_reserve == 0.0
    assert load_config(DecodeConfig, ["--critical-reserve", "0.25"]).critical_reserve == 0.25
    with pytest.raises(ValueError, match=r"^critical_reserve must be a fraction of the pool in \[0, 1\), got -0.1$"):
        DecodeConfig(critical_reserve=-0.1)
