"""A one-member etcd (Debian's etcd-server, installed by scripts/install.sh) on free loopback ports."""

from __future__ import annotations

import signal
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from agentserve.cluster.commands import etcd_command
from agentserve.cluster.ports import LocalPorts
from tests.support.processes import free_port, start_service


@contextmanager
def etcd_server(data_dir: Path) -> Iterator[str]:
    """A started etcd keeping its data under `data_dir`; yields its client address (host:port)."""
    ports = LocalPorts(etcd=free_port(), etcd_peer=free_port())
    args = etcd_command(ports, data_dir / "kv")
    service = start_service("etcd", "agentserve.cluster.tied", args, ports.etcd, timeout_s=60)
    try:
        yield service.address
    finally:
        service.stop(signal.SIGTERM)
