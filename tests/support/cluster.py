"""The whole system as local processes on free ports, for integration tests."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from agentserve.cluster.local import LocalCluster
from agentserve.cluster.ports import LocalPorts
from tests.support.processes import free_port


@contextmanager
def local_cluster(
    tmp_path_factory,
    name: str,
    decoders: int = 2,
    prefill: int = 1,
    before: str | None = None,
    cls: type[LocalCluster] = LocalCluster,
    **options,
) -> Iterator[LocalCluster]:
    """A started `cls` cluster (data and logs under pytest's tmp dirs), stopped on exit; with
    `before`, started only up to that service (see `LocalCluster.start`)."""
    cluster = cls(
        LocalPorts.free(decoders, prefill),
        decoders=decoders,
        prefill=prefill,
        data_dir=tmp_path_factory.mktemp(f"kv-{name}"),
        log_dir=tmp_path_factory.mktemp(f"logs-{name}"),
        **options,
    )
    cluster.start(timeout_s=240, before=before)
    try:
        yield cluster
    finally:
        cluster.stop()


class MeteredCluster(LocalCluster):
    """The cluster with a Prometheus port on every engine (the scheduler has one already), to read
    their counters; `metrics` maps an engine's name to its port."""

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.metrics: dict[str, int] = {}

    def extra_args(self, name: str) -> list[str]:
        if not name.startswith(("prefill", "decode")):
            return []
        self.metrics[name] = free_port()
        return ["--metrics-port", str(self.metrics[name])]
