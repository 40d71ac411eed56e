"""Prometheus metrics of the kvstore, served on `/metrics` by the server skeleton.

Counters count RPC outcomes; the store's own totals (blocks, bytes per tier, budgets, hits,
evictions) are read at scrape time, so they cannot drift from the store.
"""

from __future__ import annotations

from functools import partial

from prometheus_client import REGISTRY, CollectorRegistry, Counter, Gauge

from agentserve.kvstore.store import KVStore


class KVStoreMetrics:
    def __init__(self, store: KVStore, registry: CollectorRegistry = REGISTRY) -> None:
        self.put_blocks = Counter(
            "agentserve_kvstore_put_blocks", "Blocks received by Put/Write, by outcome", ["outcome"], registry=registry
        )  # stored | existing | rejected
        self.put_bytes = Counter("agentserve_kvstore_put_bytes", "Bytes of newly stored blocks", registry=registry)
        self.get_blocks = Counter(
            "agentserve_kvstore_get_blocks", "Blocks asked for by Get/Read, by outcome", ["outcome"], registry=registry
        )  # hit | miss
        self.get_bytes = Counter("agentserve_kvstore_get_bytes", "Bytes sent by Get/Read", registry=registry)
        Gauge("agentserve_kvstore_blocks", "Blocks stored", registry=registry).set_function(
            lambda: store.ssd.stats().blocks
        )
        Gauge("agentserve_kvstore_bytes", "Bytes stored", registry=registry).set_function(
            lambda: store.ssd.stats().bytes
        )
        Gauge(
            "agentserve_kvstore_corrupt_dropped",
            "Stored blocks found corrupt and deleted since start",
            registry=registry,
        ).set_function(lambda: store.ssd.stats().corrupt_dropped)
        tier_gauges = {
            "bytes": "Bytes held",
            "budget_bytes": "Byte budget",
            "blocks": "Blocks held",
            "hits": "Reads served since start",
            "misses": "Reads not served since start",
            "evictions": "Blocks evicted to stay within the budget since start",
        }
        for field, doc in tier_gauges.items():
            gauge = Gauge(f"agentserve_kvstore_tier_{field}", doc + ", per tier", ["tier"], registry=registry)
            for tier in ("dram", "ssd"):
                gauge.labels(tier).set_function(partial(_tier_stat, store, tier, field))


def _tier_stat(store: KVStore, tier: str, field: str) -> float:
    return getattr(getattr(store.stats(), tier), field)
