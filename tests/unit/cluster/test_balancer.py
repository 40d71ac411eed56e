"""HAProxy's configuration for compose: scheduler replicas found in Docker's DNS, with the frontends
and backends of `up --local`'s (tests/container/test_schedulers_stack.py runs it in HAProxy)."""

from __future__ import annotations

import pytest

from agentserve.cluster.balancer import dns_haproxy_config, haproxy_config
from agentserve.cluster.ports import LocalPorts, SchedulerPorts

pytestmark = pytest.mark.unit

PORTS = SchedulerPorts(grpc=50051, internal=50061, http=8000, metrics=0)


def test_replicas_come_from_dockers_dns_on_the_schedulers_ports() -> None:
    config = dns_haproxy_config("scheduler", 8, PORTS, 8404)
    assert "nameserver docker 127.0.0.11:53" in config
    templates = [line.split() for line in config.splitlines() if "server-template" in line]
    assert [t[:4] for t in templates] == [
        ["server-template", "scheduler-", "1-8", "scheduler:8000"],
        ["server-template", "scheduler-", "1-8", "scheduler:50051"],
        ["server-template", "scheduler-", "1-8", "scheduler:50061"],
    ]
    assert all("resolvers" in t and "init-addr" in t for t in templates)  # starts before any replica resolves
    for bind in ("bind 0.0.0.0:50051 proto h2", "bind 0.0.0.0:8000", "bind 0.0.0.0:50061", "bind 0.0.0.0:8404"):
        assert bind in config
    assert "monitor fail if { nbsrv(schedulers-grpc) lt 1 }" in config


def test_both_configurations_share_their_frontends_and_backends() -> None:
    local = haproxy_config(LocalPorts(), 1)
    compose = dns_haproxy_config("scheduler", 2, PORTS, 8404)

    def sections(config: str) -> list[str]:
        return [line for line in config.splitlines() if line and not line.startswith((" ", "#"))]

    assert [s for s in sections(compose) if s not in ("resolvers docker", "frontend health")] == sections(local)


def test_max_schedulers_below_one_is_refused() -> None:
    with pytest.raises(ValueError, match="max_schedulers"):
        dns_haproxy_config("scheduler", 0, PORTS, 8404)
