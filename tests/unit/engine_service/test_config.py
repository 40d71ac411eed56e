"""EngineServiceConfig: the emulated fabric's and the engine's settings, from flags and environment."""

from __future__ import annotations

import pytest

from agentserve.common.config import load_config
from agentserve.contracts import SamplingParams
from agentserve.decode.config import DecodeConfig
from agentserve.engine.engine import LLMEngine
from agentserve.engine.speculative.config import SpeculativeConfig
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


def test_speculation_is_a_setting_of_every_engine_service() -> None:
    config = load_config(
        DecodeConfig, ["--speculative-method", "ngram", "--speculative-k", "6", "--speculative-ngram", "2"]
    )
    assert config.engine_config().speculative == SpeculativeConfig("ngram", k=6, ngram=2)
    from_env = load_config(PrefillConfig, [], env={"AGENTSERVE_SPECULATIVE_METHOD": "draft"})
    assert from_env.engine_config().speculative == SpeculativeConfig("draft")
    assert DecodeConfig().engine_config().speculative == SpeculativeConfig()  # off by default
    bad_method = r"^--speculative-method: method must be one of off, ngram, draft, got 'medusa'$"
    with pytest.raises(ValueError, match=bad_method):
        load_config(DecodeConfig, ["--speculative-method", "medusa"])
    with pytest.raises(ValueError, match=r"^speculative k must be an integer in \[1, 32\], got 0$"):
        DecodeConfig(speculative=SpeculativeConfig("ngram", k=0))
    with pytest.raises(ValueError, match="speculative decoding needs real compute, got compute 'emulated'"):
        DecodeConfig(compute="emulated", speculative=SpeculativeConfig("ngram"))


def test_a_served_engine_built_from_its_config_speculates(tiny_model_dir) -> None:
    """The engine an engine service builds from its flags (`EngineServiceConfig.engine_config`, as
    `EngineService` does) verifies drafts, and greedy output stays a plain engine's."""
    prompt = [11, 12, 13, 14, 15, 11, 12, 13, 14, 15, 11, 12, 13]
    greedy = SamplingParams(max_tokens=16, ignore_eos=True)
    config = load_config(DecodeConfig, ["--speculative-method", "ngram", "--speculative-ngram", "2"])
    engine = LLMEngine.for_config(str(tiny_model_dir), config.engine_config())
    plain = LLMEngine.for_config(str(tiny_model_dir), DecodeConfig().engine_config())
    assert engine.speculator is not None and plain.speculator is None
    assert engine.generate(prompt, greedy).output_token_ids == plain.generate(prompt, greedy).output_token_ids
    assert engine.speculator.stats.sequence_steps > 0
