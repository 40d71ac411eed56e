"""A bench's cluster policy: a named set of scheduler and engine settings, each named by the config
field the service reads (`--flag` per field, see agentserve.common.config), and what a build of the
services can run.

A setting this build's services do not have (a config field, or a value a policy registry does
not know) makes the policy unavailable, with the reason, rather than silently running another;
except the values in `IMPLICIT`, which are what a service without the setting does anyway (the
scheduler without a prefill or relay policy picks the least-loaded prefill engine and relays by
the turn's decode engine; the prefill engine without layerwise loads every block, then computes).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Final

from agentserve.common.config import load_config, setting_names

# The scheduler's turn order in every bench cluster (scheduler/turn_order.py; the scheduler's own
# default is arrival): among equal priorities the agent with the fewest completed turns goes first,
# so a job's last agent is not left to finish alone while the engines idle.
DEFAULT_TURN_ORDER: Final = "least-served"
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


def _config_classes() -> dict[str, type]:
    from agentserve.decode.config import DecodeConfig
    from agentserve.prefill.config import PrefillConfig
    from agentserve.scheduler.config import SchedulerConfig

    return {"scheduler": SchedulerConfig, "prefill": PrefillConfig, "decode": DecodeConfig}


def effective(policy: Policy, service: str) -> dict[str, Any]:
    """The settings `service` is given: those its config reads (an absent one is implicit or the
    policy is unsupported)."""
    known = set(setting_names(_config_classes()[service]))
    return {k: v for k, v in policy.settings(service).items() if k in known}


def unsupported(policy: Policy) -> list[str]:
    """Why this build cannot run `policy` (empty: it can): every setting is checked by loading
    the service's own config from the flags the cluster passes it, as the service does, so a
    setting or value it does not know is named here."""
    problems = []
    for service, cls in _config_classes().items():
        settings = policy.settings(service)
        known = set(setting_names(cls))
        missing = sorted(k for k, v in settings.items() if k not in known and (k, v) not in IMPLICIT)
        if missing:
            problems.append(
                f"{service} has no setting {', '.join(f'{k}={settings[k]}' for k in missing)} in this build"
            )
            continue
        try:
            load_config(cls, flags(effective(policy, service)), env={})
        except ValueError as exc:
            problems.append(f"{service}: {exc}")
    return problems


def flags(settings: Mapping[str, Any]) -> list[str]:
    """`{"kv_path_policy": "split", "layerwise": True}` -> `--kv-path-policy split --layerwise true`."""
    out = []
    for name, value in settings.items():
        text = str(value).lower() if isinstance(value, bool) else str(value)
        out += [f"--{name.replace('_', '-')}", text]
    return out
