"""LocalPorts: where each service of a local cluster listens (fixed defaults, or free ports).

With several schedulers, the clients' ports (`scheduler`, `http`) and the engines' (`scheduler_internal`)
are the load balancer's, and each scheduler listens on ports of its own (`SchedulerPorts`).

Free ports are free when picked, not reserved: another process may bind one before its service
does. Such ports are `movable`: a service that finds one taken at its start moves to fresh ones
(`reassigned`) and starts again (`LocalCluster.start`)."""

from __future__ import annotations

from dataclasses import dataclass, replace

from agentserve.common.netutil import free_port

LOOPBACK = "127.0.0.1"


@dataclass(frozen=True)
class SchedulerPorts:
    """One scheduler's own ports."""

    grpc: int
    internal: int
    http: int
    metrics: int

    @classmethod
    def free(cls) -> SchedulerPorts:
        return cls(free_port(), free_port(), free_port(), free_port())


@dataclass(frozen=True)
class LocalPorts:
    scheduler: int = 50051
    http: int = 8000
    kvstore: int = 50052
    prefill: int = 50053
    decode_base: int = 50054
    decode_ports: tuple[int, ...] = ()  # explicit ports (tests); default decode_base + i
    metrics: int = 9100  # the scheduler's Prometheus /metrics
    prefill_ports: tuple[int, ...] = ()  # every prefill engine's, when there are several
    scheduler_internal: int = 50061  # engines' registration, the tool proxy's events

    @classmethod
    def free(cls, decoders: int, prefill: int = 1) -> LocalPorts:
        """Distinct free loopback ports for every service (tests, benches beside other work)."""
        prefill_ports = tuple(free_port() for _ in range(prefill))
        return cls(
            movable=True,
            scheduler=free_port(),
            scheduler_internal=free_port(),
            http=free_port(),
            kvstore=free_port(),
            prefill=prefill_ports[0],
            prefill_ports=prefill_ports if prefill > 1 else (),
            decode_ports=tuple(free_port() for _ in range(decoders)),
            toolproxy_grpc=free_port(),
            toolproxy_http=free_port(),
            metrics=free_port(),
            etcd=free_port(),
            etcd_peer=free_port(),
        )

    toolproxy_grpc: int = 50050
    toolproxy_http: int = 8080
    etcd: int = 2379  # the shared state's client URL (state etcd)
    etcd_peer: int = 2380  # etcd's peer URL (a cluster of one member)
    scheduler_ports: tuple[SchedulerPorts, ...] = ()  # each scheduler's own, when there are several
    movable: bool = False  # picked free (`free`): a service may move off a port taken before it bound it

    def reassigned(self, name: str) -> LocalPorts:
        """These ports with fresh free ones for every port service `name` listens on, for a service
        whose start found one taken. Only before the services that dial it start (each dials those
        started before it), and only `movable` ports: fixed ones are the operator's choice."""
        if not self.movable:
            raise ValueError("fixed ports are not reassigned; a service whose port is taken fails")
        kind, _, index = name.partition("-")
        if name == "kvstore":
            return replace(self, kvstore=free_port())
        if name == "toolproxy":
            return replace(self, toolproxy_grpc=free_port(), toolproxy_http=free_port())
        if name == "scheduler":
            return replace(
                self, scheduler=free_port(), scheduler_internal=free_port(), http=free_port(), metrics=free_port()
            )
        if kind == "scheduler" and index.isdigit() and int(index) < len(self.scheduler_ports):
            own = SchedulerPorts.free()
            metrics = own.metrics if index == "0" else self.metrics  # the first keeps the cluster's
            return replace(self, metrics=metrics, scheduler_ports=_with(self.scheduler_ports, int(index), own))
        if name == "prefill" or (kind == "prefill" and index == "0"):
            port = free_port()
            return replace(
                self, prefill=port, prefill_ports=_with(self.prefill_ports, 0, port) if self.prefill_ports else ()
            )
        if kind == "prefill" and index.isdigit() and int(index) < len(self.prefill_ports):
            return replace(self, prefill_ports=_with(self.prefill_ports, int(index), free_port()))
        if kind == "decode" and index.isdigit() and int(index) < len(self.decode_ports):
            return replace(self, decode_ports=_with(self.decode_ports, int(index), free_port()))
        raise ValueError(f"no ports of {name!r} to reassign")

    def with_schedulers(self, count: int) -> LocalPorts:
        """These ports with each of `count` schedulers' own (free) ports: with more than one, the
        clients' and the engines' ports go to the load balancer in front of them. The first
        scheduler keeps the metrics port (`up --local` prints it)."""
        if count <= max(1, len(self.scheduler_ports)):
            return self
        first = SchedulerPorts(free_port(), free_port(), free_port(), self.metrics)
        return replace(self, scheduler_ports=(first, *(SchedulerPorts.free() for _ in range(count - 1))))

    def scheduler_instance(self, index: int) -> SchedulerPorts:
        """The ports of scheduler `index`: its own, or the clients' when it is the only one."""
        if self.scheduler_ports:
            return self.scheduler_ports[index]
        if index == 0:
            return SchedulerPorts(self.scheduler, self.scheduler_internal, self.http, self.metrics)
        raise ValueError(f"no ports for scheduler {index}; use LocalPorts.with_schedulers")

    def with_prefill(self, count: int) -> LocalPorts:
        """These ports with one for each of `count` prefill engines: the prefill port first, free
        ports for the rest (fixed ones would collide with the decode ports that follow 50053)."""
        if count <= max(1, len(self.prefill_ports)):
            return self
        have = self.prefill_ports or (self.prefill,)
        return replace(self, prefill_ports=have + tuple(free_port() for _ in range(count - len(have))))

    def prefill_port(self, index: int) -> int:
        if self.prefill_ports:
            return self.prefill_ports[index]
        if index == 0:
            return self.prefill
        raise ValueError(f"no port for prefill engine {index}; use LocalPorts.with_prefill")


def _with(ports: tuple, index: int, value: object) -> tuple:
    return (*ports[:index], value, *ports[index + 1 :])
