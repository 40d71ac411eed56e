"""How NIC state leaves the process: `NICStatus` messages for the heartbeat, Prometheus on /metrics.

Both read `EmulatedNIC.stats()` at the moment they are asked, so they cannot drift from the NICs.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator

from prometheus_client import REGISTRY, CollectorRegistry
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from agentserve.fabric.nic import EmulatedNIC
from agentserve.v1 import fabric_pb2


def nic_status(nics: Iterable[EmulatedNIC]) -> list[fabric_pb2.NICStatus]:
    """One `NICStatus` per NIC, for `EngineStatus` in registration and heartbeats."""
    out = []
    for nic in nics:
        s = nic.stats()
        out.append(
            fabric_pb2.NICStatus(
                name=s.name,
                configured_gbps=s.gbps,
                queue_bytes=s.queue_bytes,
                active_transfers=s.active_transfers,
                bytes_total=s.bytes_total,
            )
        )
    return out


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
