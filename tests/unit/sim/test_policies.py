import dataclasses

import pytest

from agentserve.bench.papers.dualpath.policies import POLICY_NAMES, policies
from agentserve.engine.prefill_batch import PREFILL_BATCHING, ComputeQuotaBatch, FcfsBatch
from agentserve.prefill.config import PrefillConfig
from agentserve.scheduler.config import SchedulerConfig
from agentserve.scheduler.paths import POLICIES as PATH_POLICIES
from agentserve.scheduler.prefill_policy import PREFILL_POLICIES
from agentserve.scheduler.relay_policy import RELAY_POLICIES
from agentserve.scheduler.turn_order import TURN_ORDERS
from agentserve.sim.policies import batching, resolve, scheduler_policies


def test_every_scheduler_policy_name_resolves_to_the_registry_class_the_scheduler_uses() -> None:
    base = SchedulerConfig()
    for name, cls in PREFILL_POLICIES.items():
        assert type(scheduler_policies(dataclasses.replace(base, prefill_policy=name))[0]) is cls
    for name, cls in PATH_POLICIES.items():
        assert type(scheduler_policies(dataclasses.replace(base, kv_path_policy=name))[1]) is cls
    for name, cls in RELAY_POLICIES.items():
        assert type(scheduler_policies(dataclasses.replace(base, relay_policy=name))[2]) is cls
    for name, cls in TURN_ORDERS.items():
        assert type(scheduler_policies(dataclasses.replace(base, turn_order=name))[3]) is cls  # type: ignore[arg-type]


def test_every_prefill_batching_name_resolves_to_the_engines_class() -> None:
    classes = {"fcfs": FcfsBatch, "compute-quota": ComputeQuotaBatch}
    assert set(classes) == set(PREFILL_BATCHING)
    for name, cls in classes.items():
        assert type(batching(PrefillConfig(prefill_batching=name))) is cls


def test_bench_policies_resolve_to_their_settings() -> None:
    assert set(POLICY_NAMES) == set(policies())
    base, dual, split = resolve("baseline"), resolve("dualpath"), resolve("dualpath-split")
    assert (base.prefill_policy.name, base.path_policy.name, base.relay_policy.name) == (
        "least-loaded",
        "always-a",
        "turn-decode",
    )
    assert not base.layerwise and base.batching.name == "fcfs"
    assert resolve("layerwise").layerwise
    assert (dual.prefill_policy.name, dual.path_policy.name, dual.relay_policy.name) == ("dualpath",) * 3
    assert dual.layerwise and dual.batching.name == "compute-quota"
    assert split.path_policy.name == "split"
    assert base.turn_order.name == "least-served"  # bench dualpath's turn order for every policy


def test_an_unknown_policy_is_named_with_the_choices() -> None:
    with pytest.raises(ValueError, match="unknown sim policy 'fast'.*baseline"):
        resolve("fast")
    with pytest.raises(ValueError, match="turn_order must be one of arrival, least-served"):
        resolve("baseline", turn_order="random")
