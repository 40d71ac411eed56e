"""The system a replay drives: one the bench starts (`--target local`), or one already running
(`--address`/`--toolproxy`, e.g. the compose deployment on its published loopback ports)."""

from __future__ import annotations

import asyncio
import shutil
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from agentserve.bench.common.spans import OtlpSink, PhoenixSpans
from agentserve.cluster.local import LocalCluster
from agentserve.cluster.ports import LocalPorts
from agentserve.common.netutil import free_port


class MeteredCluster(LocalCluster):
    """`LocalCluster` on free ports whose every service also serves Prometheus `/metrics` on a
    free port of its own (`self.metrics`: service name -> URL)."""

    def __init__(
        self, decoders: int = 2, env: dict[str, str] | None = None, root: Path | None = None, **cluster_options: Any
    ) -> None:
        self.root = Path(tempfile.mkdtemp(prefix="agentserve-bench-")) if root is None else root
        ports = LocalPorts.free(decoders)
        super().__init__(
            ports, decoders=decoders, data_dir=self.root / "kv", log_dir=self.root / "logs", env=env, **cluster_options
        )
        self.metrics: dict[str, str] = {}

    def extra_args(self, name: str) -> list[str]:
        if name == "scheduler":  # its metrics port is one of the cluster's ports
            self.metrics[name] = f"http://127.0.0.1:{self.ports.metrics}/metrics"
            return []
        metrics_port = free_port()
        self.metrics[name] = f"http://127.0.0.1:{metrics_port}/metrics"
        return ["--metrics-port", str(metrics_port)]

    def start(self, timeout_s: float = 240.0, before: str | None = None) -> None:
        super().start(timeout_s, before)  # a longer default: the bench often starts beside other work

    def remove(self) -> None:
        shutil.rmtree(self.root, ignore_errors=True)


@dataclass
class Target:
    address: str
    toolproxy_url: str
    metrics: dict[str, str] = field(default_factory=dict)
    spans: OtlpSink | PhoenixSpans | None = None
    description: str = ""
    cluster: MeteredCluster | None = None

    async def close(self, keep_logs_in: Path | None = None) -> None:
        if self.cluster is not None:
            await asyncio.to_thread(self.cluster.stop)
            if keep_logs_in is not None:
                shutil.copytree(self.cluster.log_dir, keep_logs_in / "cluster-logs", dirs_exist_ok=True)
            self.cluster.remove()
        if isinstance(self.spans, OtlpSink):
            await self.spans.stop()


async def local_target(decoders: int = 2, **cluster_options: Any) -> Target:
    """Start every service as a local process (free ports, fresh store), exporting spans to us;
    `cluster_options` go to `LocalCluster` (e.g. `fabric=`)."""
    sink = OtlpSink()
    endpoint = await sink.start()
    # Spans leave each service in batches; a short delay keeps the KV timeline sharp.
    env = {"OTEL_EXPORTER_OTLP_ENDPOINT": endpoint, "OTEL_BSP_SCHEDULE_DELAY": "500"}
    cluster = MeteredCluster(decoders=decoders, env=env, **cluster_options)
    try:
        await asyncio.to_thread(cluster.start)
    except BaseException:
        await sink.stop()
        cluster.remove()
        raise
    p = cluster.ports
    fabric = getattr(cluster, "fabric", None)
    fabric_text = f"; fabric {fabric.profile}, kv paths {fabric.kv_path_policy}" if fabric else ""
    return Target(
        f"127.0.0.1:{p.scheduler}",
        f"http://127.0.0.1:{p.toolproxy_http}",
        dict(cluster.metrics),
        sink,
        f"local cluster (1 prefill, {decoders} decode{fabric_text}; logs {cluster.log_dir})",
        cluster,
    )


def remote_target(address: str, toolproxy_url: str, metrics: dict[str, str], phoenix_url: str | None) -> Target:
    spans = PhoenixSpans(phoenix_url) if phoenix_url else None
    return Target(address, toolproxy_url, metrics, spans, f"running system at {address}")


def parse_metrics_targets(items: list[str] | None) -> dict[str, str]:
    """`["kvstore=http://127.0.0.1:9100/metrics", ...]` -> {"kvstore": url}."""
    out = {}
    for item in items or []:
        name, sep, url = item.partition("=")
        if not sep or not name or not url.startswith(("http://", "https://")):
            raise ValueError(f"--metrics takes NAME=http://HOST:PORT/metrics, got {item!r}")
        out[name] = url
    return out
