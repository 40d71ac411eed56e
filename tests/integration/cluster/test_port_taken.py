"""A local cluster's service whose free port another process bound between the pick and the bind
(a real race where several clusters start side by side): the service exits `PORT_TAKEN_EXIT`
naming the port, and the cluster starts it again on fresh ports. On fixed ports the start fails,
with the end of the service's log in the error."""

from __future__ import annotations

import json
import socket
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import grpc
import pytest

from agentserve.cluster.local import LocalCluster
from agentserve.cluster.ports import LocalPorts
from agentserve.cluster.readiness import ExitedEarly
from agentserve.common.port_taken import PORT_TAKEN_EXIT
from agentserve.engine.model_catalog import ServedModel

pytestmark = pytest.mark.integration


class ToolProxyOnly(LocalCluster):
    """The cluster's start path with only the tool proxy, which starts without its scheduler."""

    def service_commands(self, model: ServedModel) -> list[tuple[str, int, list[str]]]:
        return [command for command in super().service_commands(model) if command[0] == "toolproxy"]


@contextmanager
def taken(kind: str, port: int) -> Iterator[None]:
    """Another holder of `port`: a plain listener, or a gRPC server (which binds with SO_REUSEPORT,
    so a second gRPC server would share the port silently unless it refuses to)."""
    if kind == "listener":
        with socket.create_server(("127.0.0.1", port)):
            yield
        return
    server = grpc.server(thread_pool=None)  # type: ignore[arg-type] - never started: the bind is what holds the port
    assert server.add_insecure_port(f"127.0.0.1:{port}") == port
    try:
        yield
    finally:
        server.stop(None)


def _cluster(tmp_path: Path, ports: LocalPorts) -> ToolProxyOnly:
    return ToolProxyOnly(ports, decoders=1, data_dir=tmp_path / "kv", log_dir=tmp_path / "logs", internal_tls=False)


@pytest.mark.parametrize(("port", "holder"), [("toolproxy_http", "listener"), ("toolproxy_grpc", "grpc")])
def test_a_port_taken_after_the_pick_moves_the_service_to_fresh_ports(tmp_path, port, holder) -> None:
    picked = LocalPorts.free(decoders=1)
    with taken(holder, getattr(picked, port)):
        cluster = _cluster(tmp_path, picked)
        cluster.start(timeout_s=60)
        try:
            moved = cluster.ports
            assert {moved.toolproxy_grpc, moved.toolproxy_http}.isdisjoint(
                {picked.toolproxy_grpc, picked.toolproxy_http}
            )
            assert [(p.name, p.grpc_port) for p in cluster.procs] == [("toolproxy", moved.toolproxy_grpc)]
            with urllib.request.urlopen(f"http://127.0.0.1:{moved.toolproxy_http}/tools", timeout=10) as reply:
                assert reply.status == 200 and json.loads(reply.read())
            log = (tmp_path / "logs" / "toolproxy.log").read_text()
            assert "a port is taken" in log and str(getattr(picked, port)) in log
            assert f"exiting {PORT_TAKEN_EXIT}" in log and "toolproxy SERVING" in log
        finally:
            cluster.stop()


def test_on_fixed_ports_a_taken_port_fails_the_start_with_the_services_log(tmp_path) -> None:
    free = LocalPorts.free(decoders=1)
    fixed = LocalPorts(toolproxy_grpc=free.toolproxy_grpc, toolproxy_http=free.toolproxy_http)
    with taken("listener", fixed.toolproxy_http), pytest.raises(ExitedEarly) as failed:
        _cluster(tmp_path, fixed).start(timeout_s=60)
    assert failed.value.returncode == PORT_TAKEN_EXIT
    message = str(failed.value)
    assert message.startswith(f"toolproxy exited with code {PORT_TAKEN_EXIT} (log: {tmp_path / 'logs'}")
    assert "its log ends:\n" in message and f"('127.0.0.1', {fixed.toolproxy_http})" in message
