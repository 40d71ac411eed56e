"""Prometheus metrics of the kvstore, served on `/metrics` by the server skeleton.

Counters count RPC outcomes; the store's own totals (blocks, bytes, corrupt drops) are read at
scrape time, so they cannot drift from the index.
"""

from __future__ import annotations

from prometheus_client import REGISTRY, CollectorRegistry, Counter, Gauge

from agentserve.kvstore.store import BlockStore


class KVStoreMetrics:
    def __init__(self, store: BlockStore, registry: CollectorRegistry = REGISTRY) -> None:
        self.put_blocks = Counter("agentserve_kvstore_put_blocks", "Blocks received by Put, by outcome",
                                  ["outcome"], registry=registry)  # stored | existing | rejected
        self.put_bytes = Counter("agentserve_kvstore_put_bytes", "Bytes of newly stored blocks",
                                 registry=registry)
        self.get_blocks = Counter("agentserve_kvstore_get_blocks", "Blocks asked for by Get, by outcome",
                                  ["outcome"], registry=registry)  # hit | miss
        self.get_bytes = Counter("agentserve_kvstore_get_bytes", "Bytes of blocks sent by Get",
                                 registry=registry)
        Gauge("agentserve_kvstore_blocks", "Blocks stored", registry=registry).set_function(
            lambda: store.stats().blocks)
        Gauge("agentserve_kvstore_bytes", "Bytes stored", registry=registry).set_function(
            lambda: store.stats().bytes)
        Gauge("agentserve_kvstore_corrupt_dropped", "Stored blocks found corrupt and deleted since start",
              registry=registry).set_function(lambda: store.stats().corrupt_dropped)
