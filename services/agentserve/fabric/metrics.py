"""How NIC state leaves the process: `NICStatus` for the heartbeat, Prometheus on /metrics.

Both read `EmulatedNIC.stats()` at the moment they are asked, so they cannot drift from the NICs.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator

from prometheus_client import REGISTRY, CollectorRegistry
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from agentserve.contracts import NICStatus
from agentserve.fabric.nic import EmulatedNIC


def nic_status(nics: Iterable[EmulatedNIC]) -> tuple[NICStatus, ...]:
    """One `NICStatus` per NIC, for `EngineStatus` in registration and heartbeats."""
    return tuple(
        NICStatus(s.name, s.gbps, s.queue_bytes, s.active_transfers, s.bytes_total) for s in (n.stats() for n in nics)
    )


class NICCollector(Collector):
    """Prometheus metrics of this process's NICs, labelled `nic` (snic, cnic)."""

    def __init__(self, nics: Iterable[EmulatedNIC]) -> None:
        self.nics = list(nics)

    def collect(self) -> Iterator[Metric]:
        families: dict[str, GaugeMetricFamily | CounterMetricFamily] = {
            "queue": GaugeMetricFamily(
                "agentserve_nic_queue_bytes", "Bytes of open transfers not yet let through", labels=["nic"]
            ),
            "active": GaugeMetricFamily("agentserve_nic_active_transfers", "Open transfers", labels=["nic"]),
            "gbps": GaugeMetricFamily(
                "agentserve_nic_configured_gbps", "Configured bandwidth (0 = unshaped)", labels=["nic"]
            ),
            "bytes": CounterMetricFamily("agentserve_nic_bytes", "Bytes let through", labels=["nic"]),
            "transfers": CounterMetricFamily("agentserve_nic_transfers", "Finished transfers", labels=["nic"]),
            "wait": CounterMetricFamily(
                "agentserve_nic_wait_seconds", "Time chunks waited for this NIC's tokens", labels=["nic"]
            ),
            "busy": CounterMetricFamily(
                "agentserve_nic_busy_seconds", "Time the emulated wire was occupied", labels=["nic"]
            ),
        }
        for nic in self.nics:
            s = nic.stats()
            for key, value in (
                ("queue", s.queue_bytes),
                ("active", s.active_transfers),
                ("gbps", s.gbps),
                ("bytes", s.bytes_total),
                ("transfers", s.transfers_total),
                ("wait", s.wait_s_total),
                ("busy", s.busy_s_total),
            ):
                families[key].add_metric([s.name], value)
        yield from families.values()


def register_nic_metrics(nics: Iterable[EmulatedNIC], registry: CollectorRegistry = REGISTRY) -> NICCollector:
    collector = NICCollector(nics)
    registry.register(collector)
    return collector
