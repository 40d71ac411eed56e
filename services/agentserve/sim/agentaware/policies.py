"""The policies `sim agentaware` runs, by name: the lifecycle policies of the scheduler
(`scheduler/kv_lifecycle.py`) with the rest of their stacks as `bench agentaware` runs them
(`bench/papers/agentaware/stacks.py`), plus `vllm`, TokenCake's baseline.

- `vllm`: no store tier. A session's KV stays in the engine's pool (LRU) until evicted; an evicted
  context is computed again on the session's next turn; first come, first served.
- `lru`: agentserve's default: the same pool, but every persisted block is in the store, so an
  evicted context is loaded back over the storage NIC instead of recomputed.
- `ttl-pin`, `offload`, `tokencake`, `agentserve`: store-backed, with their lifecycle policy and
  the engine settings their stack turns on (hinted eviction, a critical reserve, demotion).

Each name resolves to the services' own objects: `make_lifecycle_policy` for the lifecycle and
`make_eviction_policy` (through the `BlockManager`) for the pools.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from agentserve.bench.papers.agentaware.stacks import STACKS
from agentserve.kv.eviction import DEFAULT_EVICTION_POLICY, check_eviction_policy
from agentserve.scheduler.kv_lifecycle import LIFECYCLE_POLICIES, LifecyclePolicy, make_lifecycle_policy

VLLM = "vllm"
POLICY_NAMES = (VLLM, *LIFECYCLE_POLICIES)
MIN_WAIT_S = 0.5  # the scheduler's default `kv_min_wait_s`: shorter waits are not worth two moves


@dataclass(frozen=True)
class AwarePolicy:
    name: str
    store: bool  # evicted KV is in the store (loaded back) rather than recomputed
    lifecycle: str  # the scheduler's `kv_lifecycle`
    eviction: str = DEFAULT_EVICTION_POLICY  # the pools' `eviction_policy`
    critical_reserve: float = 0.0  # the engines' `critical_reserve`
    offload: str = "drop"  # the scheduler's `kv_offload`

    def lifecycle_policy(self, reload_s_per_block: float) -> LifecyclePolicy:
        return make_lifecycle_policy(self.lifecycle, reload_s_per_block, MIN_WAIT_S, self.offload)

    def to_dict(self) -> dict[str, Any]:
        return {
            "store": self.store,
            "kv_lifecycle": self.lifecycle,
            "eviction_policy": self.eviction,
            "critical_reserve": self.critical_reserve,
            "kv_offload": self.offload,
        }


def make_aware_policy(name: str) -> AwarePolicy:
    """The policy called `name`; ValueError naming the choices if there is none."""
    if name == VLLM:
        return AwarePolicy(VLLM, store=False, lifecycle="lru")
    if name not in LIFECYCLE_POLICIES:
        raise ValueError(f"sim agentaware policy must be one of {', '.join(POLICY_NAMES)}, got {name!r}")
    stack = STACKS.get(name, {})
    engine = stack.get("decode", {})
    return AwarePolicy(
        name,
        store=True,
        lifecycle=name,
        eviction=check_eviction_policy(str(engine.get("eviction_policy", DEFAULT_EVICTION_POLICY))),
        critical_reserve=float(engine.get("critical_reserve", 0.0)),
        offload=str(stack.get("scheduler", {}).get("kv_offload", "drop")),
    )
