"""RestartPolicy: when `agentserve up --local` restarts a service that died, with backoff.

A service that died is restarted after `initial_s`, doubling each time it dies again, up to
`max_s`; one that stayed up for `stable_s` is healthy again and starts over from `initial_s`.
After `max_restarts` restarts in a row without such a stable run, the supervisor gives up and
stops everything (a service that cannot start would otherwise be restarted forever).
"""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True)
class RestartPolicy:
    initial_s: float = 1.0
    max_s: float = 30.0
    stable_s: float = 60.0
    max_restarts: int = 5

    def __post_init__(self) -> None:
        if not 0 < self.initial_s <= self.max_s:
            raise ValueError(f"need 0 < initial_s <= max_s, got {self.initial_s} and {self.max_s}")
        if self.stable_s <= 0 or self.max_restarts < 1:
            raise ValueError("stable_s must be positive and max_restarts at least 1")


@dataclass
class RestartState:
    """One service's restarts: `died(now)` says when to start it again, or None to give up."""

    policy: RestartPolicy = field(default_factory=RestartPolicy)
    started_at: float = 0.0
    restarts: int = 0  # in a row, without a stable run between

    def started(self, now: float) -> None:
        self.started_at = now

    def died(self, now: float) -> float | None:
        if now - self.started_at >= self.policy.stable_s:
            self.restarts = 0
        if self.restarts >= self.policy.max_restarts:
            return None
        delay = min(self.policy.max_s, self.policy.initial_s * 2**self.restarts)
        self.restarts += 1
        return now + delay
