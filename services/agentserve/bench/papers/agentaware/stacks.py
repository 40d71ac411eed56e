"""What each lifecycle policy's cluster runs with besides the scheduler's `kv_lifecycle`.

The lifecycle name alone only chooses what happens to a session's KV on a tool wait; the rest of
the agent-aware stack is settings of other services, off by default. A policy that claims a piece
turns it on here, so the bench measures what the policy is, not just its parking:

- `lru`, `ttl-pin`, `offload`: service defaults (LRU pools, FCFS-by-arrival share of the pool,
  no admission): the baselines as their systems run, never weakened.
- `tokencake`: its space scheduler on one engine's view: pools evict by the scheduler's hints
  (`eviction_policy=hinted`: pinned until the predicted return, then priority, then next use) and
  hold a share of each engine's pool for critical-path agents (`critical_reserve`).
- `agentserve`: all of it, plus KV admission (`kv_commit_ratio`): past that multiple of the
  decode pools, new sessions and turns wait (429 with Retry-After, retried by the replayer)
  rather than evict the KV of sessions coming back from tools; and parked KV is demoted rather
  than dropped (`kv_offload=demote`): it leaves a pool only when the pool needs the room, so a
  wait without memory pressure costs no reload.
"""

from __future__ import annotations

from typing import Any

from agentserve.bench.common.policy import Policy

CRITICAL_RESERVE = 0.2  # share of each engine's pool critical-path agents may hold back
# Committed KV (turns in flight and tool-waiting histories, each counting the shared system prompt
# again) up to 4x the decode pools: a bound against overload, not a throttle below saturation.
KV_COMMIT_RATIO = 4.0

_HINTED_POOLS = {"eviction_policy": "hinted", "critical_reserve": CRITICAL_RESERVE}

# policy -> service -> settings beyond kv_lifecycle
STACKS: dict[str, dict[str, dict[str, Any]]] = {
    "tokencake": {"prefill": _HINTED_POOLS, "decode": _HINTED_POOLS},
    "agentserve": {
        "scheduler": {"kv_commit_ratio": KV_COMMIT_RATIO, "kv_offload": "demote"},
        "prefill": _HINTED_POOLS,
        "decode": _HINTED_POOLS,
    },
}


def lifecycle_policy(name: str, scheduler_settings: dict[str, Any] | None = None) -> Policy:
    """The cluster settings of lifecycle policy `name`: its stack, then `scheduler_settings`
    (the bench's own, applied to every policy) over it."""
    stack = STACKS.get(name, {})
    parts = [f"kv_lifecycle={name}"] + [
        f"{service}: " + " ".join(f"{k}={v}" for k, v in sorted(settings.items()))
        for service, settings in stack.items()
    ]
    return Policy(
        name,
        "; ".join(parts),
        {"kv_lifecycle": name, **stack.get("scheduler", {}), **(scheduler_settings or {})},
        dict(stack.get("prefill", {})),
        dict(stack.get("decode", {})),
    )
