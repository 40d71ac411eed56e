"""LocalPorts.reassigned: a service whose free port was taken moves to fresh ports of its own and
nothing else moves; fixed ports never move."""

from __future__ import annotations

import itertools
from dataclasses import asdict

import pytest

from agentserve.cluster import ports as cluster_ports
from agentserve.cluster.ports import LocalPorts

pytestmark = pytest.mark.unit


@pytest.fixture(autouse=True)
def ports_from_a_counter(monkeypatch: pytest.MonkeyPatch) -> None:
    """`free_port` asks the kernel through a socket; here it hands out distinct numbers."""
    ports = itertools.count(40000)
    monkeypatch.setattr(cluster_ports, "free_port", lambda host="127.0.0.1": next(ports))


def _moved(before: LocalPorts, after: LocalPorts) -> set[str]:
    old, new = asdict(before), asdict(after)
    return {key for key in old if old[key] != new[key]}


@pytest.mark.parametrize(
    ("name", "fields"),
    [
        ("kvstore", {"kvstore"}),
        ("scheduler", {"scheduler", "scheduler_internal", "http", "metrics"}),
        ("toolproxy", {"toolproxy_grpc", "toolproxy_http"}),
        ("prefill-0", {"prefill", "prefill_ports"}),
        ("prefill-1", {"prefill_ports"}),
        ("decode-1", {"decode_ports"}),
    ],
)
def test_a_service_moves_to_fresh_ports_of_its_own_only(name, fields) -> None:
    ports = LocalPorts.free(decoders=2, prefill=2)
    moved = ports.reassigned(name)
    assert _moved(ports, moved) == fields
    taken = {port for port in asdict(ports).values() if isinstance(port, int)}
    assert not taken & {getattr(moved, field) for field in fields if isinstance(getattr(moved, field), int)}
    if name == "prefill-0":
        assert moved.prefill_ports == (moved.prefill, ports.prefill_ports[1])
    if name == "decode-1":
        assert moved.decode_ports[0] == ports.decode_ports[0] and moved.decode_ports[1] not in taken


def test_each_of_several_schedulers_moves_alone_and_the_first_keeps_the_metrics_port() -> None:
    ports = LocalPorts.free(decoders=1).with_schedulers(2)
    second = ports.reassigned("scheduler-1")
    assert _moved(ports, second) == {"scheduler_ports"} and second.scheduler_ports[0] == ports.scheduler_ports[0]
    first = ports.reassigned("scheduler-0")
    assert _moved(ports, first) == {"scheduler_ports", "metrics"}
    assert first.scheduler_ports[0].metrics == first.metrics and first.scheduler_ports[1] == ports.scheduler_ports[1]


def test_fixed_ports_and_services_without_ports_of_their_own_do_not_move() -> None:
    with pytest.raises(ValueError, match="fixed ports are not reassigned"):
        LocalPorts().reassigned("toolproxy")
    with pytest.raises(ValueError, match="no ports of 'etcd' to reassign"):
        LocalPorts.free(decoders=1).reassigned("etcd")
    with pytest.raises(ValueError, match="no ports of 'decode-2' to reassign"):
        LocalPorts.free(decoders=2).reassigned("decode-2")
