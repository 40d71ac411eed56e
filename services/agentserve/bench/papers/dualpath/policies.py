"""The systems `bench dualpath` compares: each a set of scheduler and engine settings, named by
the config fields the services read (`--flag` per field, see agentserve.common.config).

- baseline: the prefill engine with the least load, every store hit over its own storage NIC
  (path A), the turn's decode engine relays nothing, blocks loaded then computed (no layerwise).
- layerwise: the baseline with layerwise prefill (a layer's KV arrives while the one before it
  computes; the pool holds about one layer of cached KV per prefill).
- dualpath: DualPath as the paper builds it: prefill engine by storage read queue and unfinished
  prefill tokens, path by the shorter read queue, relay engine chosen on its own, layerwise
  prefill and batches by compute quota.
- dualpath-split: dualpath whose reads are split over both paths in proportion to free bandwidth.

Every policy runs in DualPath's regime: a session keeps no KV on its decode engine between turns
(scheduler `session_kv=store`: dropped at the turn's end, it is in the store) nor on its prefill
engine (`keep_kv=false`: dropped after the handoff, as at the paper's scale the other agents'
contexts push it out of HBM by the agent's next turn), so every hit of a later turn is read from
the store, over the prefill side's storage NIC (path A) or a decode
side's (path B); the baseline reads the same store over the prefill side's NICs only.

A setting this build's services do not have (a config field, or a value a policy registry does
not know) makes the policy unavailable, with the reason, rather than silently running another;
except the baseline's own values, which are what a service without the setting does anyway
(`IMPLICIT`: the scheduler before DualPath's policies picked least-loaded and relayed by the
turn's decode engine; the prefill engine before layerwise loaded every block, then computed).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

POLICY_NAMES = ("baseline", "layerwise", "dualpath", "dualpath-split")
# The scheduler's turn order for every policy (scheduler/turn_order.py; the scheduler's own default
# is arrival): among equal priorities the agent with the fewest completed turns goes first, so the
# job's last agent is not left to finish alone while the engines idle. `--turn-order` sets another.
DEFAULT_TURN_ORDER = "least-served"
SERVICES = ("scheduler", "prefill", "decode")


@dataclass(frozen=True)
class Policy:
    name: str
    description: str
    scheduler: Mapping[str, Any] = field(default_factory=dict)
    prefill: Mapping[str, Any] = field(default_factory=dict)
    decode: Mapping[str, Any] = field(default_factory=dict)

    def settings(self, service: str) -> Mapping[str, Any]:
        return {"scheduler": self.scheduler, "prefill": self.prefill, "decode": self.decode}[service]

    def with_settings(self, service: str, extra: Mapping[str, Any]) -> Policy:
        merged = {**self.settings(service), **extra}
        if service == "scheduler":
            return dataclasses.replace(self, scheduler=merged)
        if service == "prefill":
            return dataclasses.replace(self, prefill=merged)
        return dataclasses.replace(self, decode=merged)

    def to_dict(self) -> dict[str, Any]:
        return {"description": self.description, **{s: dict(self.settings(s)) for s in SERVICES}}


IMPLICIT = {
    ("prefill_policy", "least-loaded"),
    ("relay_policy", "turn-decode"),
    ("layerwise", False),
    ("prefill_batching", "fcfs"),
}

# The regime every policy runs in (module docstring), the baseline included.
REGIME_SCHEDULER = {"session_kv": "store"}
REGIME_PREFILL = {"keep_kv": False}
_BASE_SCHEDULER = {
    **REGIME_SCHEDULER,
    "prefill_policy": "least-loaded",
    "kv_path_policy": "always-a",
    "relay_policy": "turn-decode",
}
_DUALPATH_SCHEDULER = {
    **REGIME_SCHEDULER,
    "prefill_policy": "dualpath",
    "kv_path_policy": "dualpath",
    "relay_policy": "dualpath",
}
_PLAIN_PREFILL = {**REGIME_PREFILL, "layerwise": False, "prefill_batching": "fcfs"}
_DUALPATH_PREFILL = {**REGIME_PREFILL, "layerwise": True, "prefill_batching": "compute-quota"}


def policies() -> dict[str, Policy]:
    return {
        "baseline": Policy(
            "baseline", "least-loaded prefill, path A only, no layerwise", _BASE_SCHEDULER, _PLAIN_PREFILL
        ),
        "layerwise": Policy(
            "layerwise",
            "baseline + layerwise prefill",
            _BASE_SCHEDULER,
            {**_PLAIN_PREFILL, "layerwise": True},
        ),
        "dualpath": Policy(
            "dualpath",
            "DualPath: read-queue prefill choice, dual-path loading, relay choice, layerwise, compute-quota batches",
            _DUALPATH_SCHEDULER,
            _DUALPATH_PREFILL,
        ),
        "dualpath-split": Policy(
            "dualpath-split",
            "DualPath with each request's reads split over both paths by free bandwidth",
            {**_DUALPATH_SCHEDULER, "kv_path_policy": "split"},
            _DUALPATH_PREFILL,
        ),
    }


def _config_classes() -> dict[str, type]:
    from agentserve.engine_service.config import DecodeConfig, PrefillConfig
    from agentserve.scheduler.config import SchedulerConfig

    return {"scheduler": SchedulerConfig, "prefill": PrefillConfig, "decode": DecodeConfig}


def effective(policy: Policy, service: str) -> dict[str, Any]:
    """The settings `service` is given: those its config has (an absent one is implicit or the
    policy is unsupported)."""
    known = {f.name for f in dataclasses.fields(_config_classes()[service])}
    return {k: v for k, v in policy.settings(service).items() if k in known}


def unsupported(policy: Policy) -> list[str]:
    """Why this build cannot run `policy` (empty: it can): every setting is checked by building
    the service's own config with it, so a field or value it does not know is named here."""
    problems = []
    for service, cls in _config_classes().items():
        settings = policy.settings(service)
        known = {f.name for f in dataclasses.fields(cls)}
        missing = sorted(k for k, v in settings.items() if k not in known and (k, v) not in IMPLICIT)
        if missing:
            problems.append(
                f"{service} has no setting {', '.join(f'{k}={settings[k]}' for k in missing)} in this build"
            )
            continue
        try:
            cls(**effective(policy, service))
        except (TypeError, ValueError) as exc:
            problems.append(f"{service}: {exc}")
    return problems


def flags(settings: Mapping[str, Any]) -> list[str]:
    """`{"kv_path_policy": "split", "layerwise": True}` -> `--kv-path-policy split --layerwise true`."""
    out = []
    for name, value in settings.items():
        text = str(value).lower() if isinstance(value, bool) else str(value)
        out += [f"--{name.replace('_', '-')}", text]
    return out
