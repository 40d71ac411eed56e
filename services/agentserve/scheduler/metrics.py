"""Prometheus metrics of the scheduler (served on `--metrics-port` by the server skeleton)."""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING

from prometheus_client import Counter, Gauge, Histogram

from agentserve.common.errors import RetryableError

if TYPE_CHECKING:
    from agentserve.scheduler.placement import Placement

TURNS = Counter("agentserve_scheduler_turns_total", "Turns by outcome", ["outcome"])
TIME_TO_FIRST_TOKEN = Histogram(
    "agentserve_scheduler_ttft_seconds",
    "Turn start to first token, by first or later turn",
    ["turn"],
    buckets=(0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60),
)
# Where a turn's time went in the scheduler (local seconds): waiting for the session's previous
# turn, the store lookup, the prefill call (placement to its first token: its engine's own phases
# are `agentserve_prefill_phase_seconds`), the decode stream after it, and the KV drop at its end.
TURN_PHASE_SECONDS = Histogram(
    "agentserve_scheduler_turn_phase_seconds",
    "Turn phases in the scheduler: session_wait, lookup, prefill, decode, release; by first or later turn",
    ["phase", "turn"],
    buckets=(0.01, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 25, 60),
)
ENGINE_FAILURES = Counter("agentserve_scheduler_engine_failures_total", "Engine calls that failed", ["role"])
STORE_HIT_BLOCKS = Counter("agentserve_scheduler_store_hit_blocks_total", "Prompt blocks found in the KV store")
KV_PATHS = Counter(
    "agentserve_scheduler_kv_path_turns_total",
    "Turns by the path their store hits took to the prefill engine (A, B, SPLIT)",
    ["path"],
)
HANDOFF_BYTES = Counter("agentserve_scheduler_handoff_bytes_total", "KV bytes prefill engines handed to decode engines")
PROMPT_BLOCKS = Counter("agentserve_scheduler_prompt_blocks_total", "Full prompt blocks looked up in the store")
PLACEMENTS = Counter(
    "agentserve_scheduler_placements_total",
    "Turn placements by chosen prefill engine, the rule that chose it, and the planned path",
    ["prefill_engine", "reason", "path"],
)
RELAYS = Counter(
    "agentserve_scheduler_relays_total",
    "Path-B relays by relay engine and why it was chosen (turn-decode: the turn's own decode engine)",
    ["relay_engine", "reason"],
)
SPLIT_FRACTION = Histogram(
    "agentserve_scheduler_split_fraction",
    "Planned share of a turn's store hits read by path B (turns with store hits)",
    buckets=(0.0, 0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9, 1.0),
)
KV_PARKING = Counter(
    "agentserve_scheduler_kv_parking_total",
    "KV lifecycle actions on tool waits: offload, keep, pin, upload, upload_cancelled, failure",
    ["action"],
)
KV_PARKING_BLOCKS = Counter(
    "agentserve_scheduler_kv_parking_blocks_total", "KV blocks parking moved: dropped, uploaded", ["direction"]
)


def record_placement(placed: Placement) -> None:
    PLACEMENTS.labels(placed.prefill.engine_id, placed.prefill_reason, placed.plan.path.value).inc()
    if placed.relay is not None:
        RELAYS.labels(placed.relay.engine_id, placed.relay_reason).inc()
    if placed.hit_blocks:
        SPLIT_FRACTION.observe(placed.split_fraction)


def outcome_of(exc: BaseException | None) -> str:
    if exc is None:
        return "ok"
    if isinstance(exc, ValueError):
        return "invalid"
    if isinstance(exc, (RetryableError, ConnectionError)):
        return "retryable"
    if isinstance(exc, (GeneratorExit, asyncio.CancelledError)):
        return "cancelled"  # the client went away
    return "error"


REFUSED = Counter("agentserve_scheduler_refused_total", "Turns a load bound refused (HTTP 429)", ["bound"])
IN_FLIGHT = Gauge("agentserve_scheduler_turns_in_flight", "Turns admitted and not finished")
KV_COMMITTED = Gauge(
    "agentserve_scheduler_kv_committed_blocks",
    "KV blocks committed to turns in flight and to sessions gone to tools (KV admission's count)",
)
KV_COMMIT_LIMIT = Gauge(
    "agentserve_scheduler_kv_commit_limit_blocks",
    "KV admission's bound: kv_commit_ratio x the live decode engines' pools, in blocks (0 = none)",
)
