"""The one eviction-policy interface: LRU's exact order, the registry, and the knob in each
service's config."""

import pytest

from agentserve.common.config import load_config
from agentserve.decode.config import DecodeConfig
from agentserve.engine.engine_config import EngineConfig
from agentserve.kv.eviction import EVICTION_POLICIES, Hint, LRUPolicy, make_eviction_policy
from agentserve.kvstore.config import KVStoreConfig
from agentserve.prefill.config import PrefillConfig

pytestmark = pytest.mark.unit


def ids(*names: str) -> list[bytes]:
    return [n.encode() for n in names]


def test_lru_evicts_least_recently_used_first():
    policy = LRUPolicy()
    for b in ids("a", "b", "c", "d"):
        policy.insert(b, 1)
    policy.touch(b"b")
    policy.touch(b"a")
    policy.touch(b"unknown")  # ignored
    assert list(policy.victims()) == ids("c", "d", "b", "a")
    policy.remove(b"d")
    policy.remove(b"unknown")
    policy.insert(b"e", 1)
    assert list(policy.victims()) == ids("c", "b", "a", "e")


def test_lru_ignores_hints():
    policy = LRUPolicy()
    for b in ids("a", "b"):
        policy.insert(b, 1)
    policy.hint(b"a", Hint(priority=9, next_use_at=1.0))
    assert list(policy.victims()) == ids("a", "b")


def test_lru_pops_the_least_recently_used_and_counts_what_it_orders():
    policy = LRUPolicy()
    assert policy.pop_victim() is None and len(policy) == 0
    for b in ids("a", "b", "c"):
        policy.insert(b, 1)
    policy.touch(b"a")
    policy.insert(b"b", 1)  # inserted again: the most recently used
    assert len(policy) == 3
    assert [policy.pop_victim(), policy.pop_victim(), policy.pop_victim(), policy.pop_victim()] == ids(
        "c", "a", "b"
    ) + [None]


def test_the_registry_makes_a_fresh_policy_per_cache_and_names_the_choices():
    first, second = make_eviction_policy("lru"), make_eviction_policy()
    assert isinstance(first, LRUPolicy) and isinstance(second, LRUPolicy) and first is not second
    first.insert(b"a", 1)
    assert len(second) == 0
    with pytest.raises(ValueError, match=r"unknown eviction policy 'mru'; choose one of: hinted, lru$"):
        make_eviction_policy("mru")


@pytest.mark.parametrize("config", [KVStoreConfig, EngineConfig, PrefillConfig, DecodeConfig])
def test_each_service_config_takes_a_policy_by_name_and_refuses_an_unknown_one(config):
    assert config().eviction_policy == "lru"
    with pytest.raises(ValueError, match="unknown eviction policy 'lfu'; choose one of: hinted, lru"):
        config(eviction_policy="lfu")


@pytest.mark.parametrize("config", [KVStoreConfig, PrefillConfig, DecodeConfig])
def test_the_policy_comes_from_a_flag_or_the_environment(config, monkeypatch):
    monkeypatch.setitem(EVICTION_POLICIES, "other", LRUPolicy)
    assert load_config(config, ["--eviction-policy", "other"], env={}).eviction_policy == "other"
    assert load_config(config, [], env={"AGENTSERVE_EVICTION_POLICY": "other"}).eviction_policy == "other"
    with pytest.raises(ValueError, match="choose one of: hinted, lru, other"):
        load_config(config, [], env={"AGENTSERVE_EVICTION_POLICY": "nope"})
