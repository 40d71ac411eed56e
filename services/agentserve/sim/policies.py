"""The policies a simulated run uses, resolved by name through the scheduler's and the engines' own
registries and configs, as the services resolve them (scheduler/core.py, engine_service/config.py).

A `bench dualpath` policy (baseline, layerwise, dualpath, dualpath-split) is a set of scheduler and
prefill settings (bench/papers/dualpath/policies.py); the simulator builds the services' config
classes from those settings (so a setting they do not know is an error, as for the bench) and the
policy objects from the configs by the same `make_*` calls.
"""

from __future__ import annotations

from dataclasses import dataclass

from agentserve.bench.common.policy import DEFAULT_TURN_ORDER, effective, unsupported
from agentserve.bench.papers.dualpath.policies import policies
from agentserve.engine.prefill_batch import PrefillBatchPolicy, make_prefill_batch_policy
from agentserve.prefill.config import PrefillConfig
from agentserve.scheduler.config import SchedulerConfig
from agentserve.scheduler.paths import PathPolicy, make_path_policy
from agentserve.scheduler.prefill_policy import PrefillPolicy, make_prefill_policy
from agentserve.scheduler.relay_policy import RelayPolicy, make_relay_policy
from agentserve.scheduler.turn_order import TurnOrder, make_turn_order


@dataclass(frozen=True)
class PolicySet:
    name: str
    description: str
    scheduler: SchedulerConfig
    prefill: PrefillConfig
    prefill_policy: PrefillPolicy
    path_policy: PathPolicy
    relay_policy: RelayPolicy
    turn_order: TurnOrder
    batching: PrefillBatchPolicy

    @property
    def layerwise(self) -> bool:
        return self.prefill.layerwise

    def to_dict(self) -> dict[str, str | bool]:
        return {
            "description": self.description,
            "prefill_policy": self.prefill_policy.name,
            "kv_path_policy": self.path_policy.name,
            "relay_policy": self.relay_policy.name,
            "turn_order": self.turn_order.name,
            "layerwise": self.layerwise,
            "prefill_batching": self.batching.name,
            "load_order": self.prefill.load_order,
        }


def resolve(name: str, turn_order: str = DEFAULT_TURN_ORDER, load_order: str = "") -> PolicySet:
    """The `bench dualpath` policy called `name`, its objects built as the services build them."""
    known = policies()
    if name not in known:
        raise ValueError(f"unknown sim policy {name!r}; choose one of {', '.join(known)}")
    policy = known[name]
    problems = unsupported(policy)
    if problems:
        raise ValueError(f"sim policy {name}: {'; '.join(problems)}")
    scheduler = SchedulerConfig(**{**effective(policy, "scheduler"), "turn_order": turn_order})
    prefill_settings = effective(policy, "prefill")
    if load_order:
        prefill_settings["load_order"] = load_order
    prefill = PrefillConfig(**prefill_settings)
    return PolicySet(name, policy.description, scheduler, prefill, *scheduler_policies(scheduler), batching(prefill))


def scheduler_policies(config: SchedulerConfig) -> tuple[PrefillPolicy, PathPolicy, RelayPolicy, TurnOrder]:
    """The scheduler's policy objects for `config`, by the calls `Scheduler` makes (scheduler/core.py)."""
    return (
        make_prefill_policy(config.prefill_policy, config.prefill_alpha_ms, config.prefill_beta),
        make_path_policy(config.kv_path_policy),
        make_relay_policy(config.relay_policy, config.relay_source),
        make_turn_order(config.turn_order),
    )


def batching(config: PrefillConfig) -> PrefillBatchPolicy:
    """The prefill engine's batch policy for `config`, as the engine builds it."""
    return make_prefill_batch_policy(
        config.prefill_batching, config.prefill_token_budget, config.prefill_attention_tokens
    )
