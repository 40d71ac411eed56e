"""Prometheus metrics of the tool proxy (served on `--metrics-port` by the server skeleton)."""

from __future__ import annotations

from prometheus_client import Counter, Histogram

TOOL_CALLS = Counter("agentserve_toolproxy_calls_total", "Tool calls by tool and outcome", ["tool", "ok"])
TOOL_SECONDS = Histogram(
    "agentserve_toolproxy_call_seconds",
    "Tool call durations",
    ["tool"],
    buckets=(0.01, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300),
)
# How far the running-mean prediction was off: the scheduler's prefetch timing depends on it.
PREDICTION_ERROR_SECONDS = Histogram(
    "agentserve_toolproxy_prediction_error_seconds",
    "|actual - predicted| tool wait",
    ["tool"],
    buckets=(0.01, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60),
)
EVENTS_UNDELIVERED = Counter(
    "agentserve_toolproxy_events_undelivered_total", "Tool wait events the scheduler did not receive", ["reason"]
)
