"""The engine's KV pool on /metrics: slots in use by running sequences, held idle for a parked
session's return (the KV lifecycle's pins), cached (resident, evictable) and free, read from the
block manager at scrape time; the four states partition the pool. A benchmark samples it to plot
how much of an engine's KV memory each lifecycle policy keeps occupied, and by what: a pin keeps
KV resident, but only `used` slots are doing work."""

from __future__ import annotations

from collections.abc import Callable, Iterator

from prometheus_client import REGISTRY
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector

KV_SLOTS = "agentserve_engine_kv_slots"
STATES = ("used", "held", "cached", "free")


class PoolCollector(Collector):
    """`stats` returns the block manager's counts (`BlockManager.stats()`: used, held, cached, free;
    its `used` includes `held`, exported apart).
    Read from the scrape thread without the engine's lock: the counts are ints read once each,
    at worst one step stale."""

    def __init__(self, stats: Callable[[], dict[str, int]]) -> None:
        self._stats = stats

    def describe(self) -> Iterator[GaugeMetricFamily]:
        yield _family()  # registration checks names without reading the pool

    def collect(self) -> Iterator[GaugeMetricFamily]:
        counts = dict(self._stats())
        counts["used"] -= counts["held"]
        family = _family()
        for state in STATES:
            family.add_metric([state], counts[state])
        yield family


def _family() -> GaugeMetricFamily:
    return GaugeMetricFamily(
        KV_SLOTS,
        "KV pool slots: used (running sequences), held (pinned, parked session), cached (evictable), free",
        labels=["state"],
    )


def register_pool_metrics(stats: Callable[[], dict[str, int]]) -> PoolCollector:
    collector = PoolCollector(stats)
    REGISTRY.register(collector)
    return collector
