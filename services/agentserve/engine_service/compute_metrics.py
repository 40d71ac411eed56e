"""An emulated engine's forward time on /metrics: seconds its forwards computed (the target's time
times the dilation) and seconds a layer-by-layer forward waited for a streamed prefix's next layer.

Between them they say where a prefill engine's time went: computing, held by a load it had already
started computing over (the engine thread steps nothing else meanwhile), or neither (idle, or the
engine's own CPU work). Read at scrape time from the runner; a real-compute engine exports none."""

from __future__ import annotations

from collections.abc import Iterator

from prometheus_client import REGISTRY
from prometheus_client.core import CounterMetricFamily
from prometheus_client.registry import Collector

from agentserve.engine.emulated_runner import EmulatedRunner

FORWARD_SECONDS = "agentserve_engine_forward_seconds"  # the sample is `..._total`


class ForwardCollector(Collector):
    """Floats read once each from the scrape thread without the engine's lock: at worst one layer stale."""

    def __init__(self, runner: EmulatedRunner) -> None:
        self._runner = runner

    def describe(self) -> Iterator[CounterMetricFamily]:
        yield _family()

    def collect(self) -> Iterator[CounterMetricFamily]:
        family = _family()
        family.add_metric(["compute"], self._runner.busy_s)
        family.add_metric(["layer_wait"], self._runner.layer_wait_s)
        yield family


def _family() -> CounterMetricFamily:
    return CounterMetricFamily(
        FORWARD_SECONDS,
        "Emulated forwards: seconds computing, and seconds a layerwise prefill waited for its next layer's KV",
        labels=["kind"],
    )


def register_forward_metrics(runner: object) -> ForwardCollector | None:
    """Registers the collector for an emulated runner; None (nothing exported) for a real one."""
    if not isinstance(runner, EmulatedRunner):
        return None
    collector = ForwardCollector(runner)
    REGISTRY.register(collector)
    return collector
