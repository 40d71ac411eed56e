"""The prefill batch policies: which leading waiting prefills one engine step takes."""

from __future__ import annotations

import pytest

from agentserve.engine.engine_config import EngineConfig
from agentserve.engine.prefill_batch import ComputeQuotaBatch, FcfsBatch, make_prefill_batch_policy, select

pytestmark = pytest.mark.unit


def test_fcfs_takes_the_oldest_alone():
    assert select(FcfsBatch(), [(10, 0), (10, 0), (10, 0)]) == 1
    assert select(FcfsBatch(), []) == 0


def test_compute_quota_takes_in_order_up_to_the_budget():
    policy = ComputeQuotaBatch(token_budget=100)
    assert select(policy, [(40, 0), (60, 0), (1, 0)]) == 2  # 40 + 60 = 100 fits, one more does not
    assert select(policy, [(40, 0), (70, 0), (10, 0)]) == 1  # stops at the first that overflows: no skipping


def test_compute_quota_always_takes_the_first_however_costly():
    assert select(ComputeQuotaBatch(token_budget=100), [(500, 0), (1, 0)]) == 1


def test_compute_quota_weights_new_tokens_by_their_attention_over_the_cache():
    policy = ComputeQuotaBatch(token_budget=100, attention_tokens=1000)
    assert policy.cost(10, 3000) == 40.0  # each new token attends over 3000 cached: 1 + 3 token-equivalents
    assert select(policy, [(10, 3000), (10, 3000), (10, 2000)]) == 2  # 40 + 40 + 30 > 100
    assert ComputeQuotaBatch(token_budget=100).cost(10, 3000) == 10.0


@pytest.mark.parametrize(
    "fields, message",
    [
        ({"prefill_batching": "sjf"}, "prefill_batching must be one of fcfs, compute-quota, got 'sjf'"),
        ({"prefill_token_budget": 0}, "prefill_token_budget must be a positive integer, got 0"),
        ({"prefill_token_budget": 1.5}, "prefill_token_budget must be a positive integer, got 1.5"),
        ({"prefill_attention_tokens": -1}, "prefill_attention_tokens must be an integer >= 0, got -1"),
        ({"layerwise": "yes"}, "layerwise must be true or false, got 'yes'"),
    ],
)
def test_engine_config_names_the_bad_field(fields, message):
    with pytest.raises(ValueError) as err:
        EngineConfig(**fields)
    assert str(err.value) == message


def test_engine_config_builds_the_named_policy():
    assert EngineConfig().prefill_batch_policy() == FcfsBatch()
    config = EngineConfig(prefill_batching="compute-quota", prefill_token_budget=512, prefill_attention_tokens=64)
    assert config.prefill_batch_policy() == ComputeQuotaBatch(512, 64)
    assert make_prefill_batch_policy("fcfs", 1) == FcfsBatch()
