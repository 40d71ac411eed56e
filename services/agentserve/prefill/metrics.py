"""Where a prefill engine's turns spend their time, on /metrics: one histogram by phase (local
seconds), so a benchmark can say, per policy, how much of a turn's time to first token its prefill
engine spent waiting for pool room, loading, queued behind other prefills, in its own forward, and
persisting and handing off (`bench/papers/dualpath/phases.py` reads it)."""

from __future__ import annotations

from prometheus_client import Histogram

PHASE_SECONDS = Histogram(
    "agentserve_prefill_phase_seconds",
    "Prefill request phases: budget (waiting for pool room, without layerwise), load (store hits "
    "arriving; beside queue and forward under layerwise), queue (submitted to the engine until its "
    "forward began), forward (its forward, layer waits included), persist, handoff, drop, total",
    ["phase", "turn"],
    buckets=(0.01, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 25, 60),
)


def turn_kind(store_hit_blocks: int) -> str:
    """`later` for a turn with store hits (a session's history, or a shared prefix), else `first`."""
    return "later" if store_hit_blocks else "first"
