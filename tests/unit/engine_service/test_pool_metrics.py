"""The engine's KV pool on /metrics: the block manager's slot counts by state, read at scrape time."""

import pytest
from prometheus_client import CollectorRegistry, generate_latest

from agentserve.engine_service.pool_metrics import PoolCollector
from agentserve.kv.block_manager import BlockManager

pytestmark = pytest.mark.unit


def test_slots_by_state_follow_the_block_manager():
    blocks = BlockManager(8, 4)
    registry = CollectorRegistry()
    registry.register(PoolCollector(blocks.stats))

    def slots() -> dict[str, float]:
        return {
            s: registry.get_sample_value("agentserve_engine_kv_slots", {"state": s})
            for s in ("used", "held", "cached", "free")
        }

    assert slots() == {"used": 0.0, "held": 0.0, "cached": 0.0, "free": 8.0}
    allocation = blocks.allocate([b"a", b"b", b"c"], 12, 0)
    for slot, block_id in zip(allocation.slots, (b"a", b"b", b"c")):
        blocks.seal(slot, block_id)
    assert slots() == {"used": 3.0, "held": 0.0, "cached": 0.0, "free": 5.0}
    blocks.free(allocation.slots)  # a finished turn: its sealed blocks stay resident, evictable
    assert slots() == {"used": 0.0, "held": 0.0, "cached": 3.0, "free": 5.0}
    held = blocks.hold([b"a", b"b"])  # a parked session's KV pinned for its return: idle, not in use
    assert slots() == {"used": 0.0, "held": 2.0, "cached": 1.0, "free": 5.0}
    running = blocks.allocate([b"a", b"d"], 8, 1)  # a running turn shares a held block: that one is in use
    assert slots() == {"used": 2.0, "held": 1.0, "cached": 1.0, "free": 4.0}
    blocks.free(running.slots)
    blocks.release(held)
    assert slots() == {"used": 0.0, "held": 0.0, "cached": 3.0, "free": 5.0}
    assert b"agentserve_engine_kv_slots" in generate_latest(registry)
