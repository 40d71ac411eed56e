"""HAProxy's configuration in front of several schedulers: `up --local --schedulers N` lists each
scheduler's own loopback ports (`haproxy_config`); compose's `--scale scheduler=N`
(docker-compose.schedulers.yml) finds the replicas by the service's name in Docker's DNS
(`dns_haproxy_config`, run by `cluster/compose_balancer.py`). Both write the same frontends and backends.

It keeps the endpoints of one scheduler: the clients' OpenAI HTTP port and gRPC port (HTTP/2,
proxied as HTTP so each call, not each connection, is balanced), and the engines' and tool proxy's
internal port (TCP: its mutual TLS is end to end, HAProxy never sees inside). Calls go round-robin;
no stickiness is needed: a scheduler that receives a session it does not run forwards it to the one
that does (`scheduler/forwarding.py`). Streams (a turn's tokens) may last as long as a turn does.

A scheduler that dies is marked down by the health checks within a second (and, found by DNS, leaves
the answer once its container stops); until then a request
sent to it is retried on another (`retry-on conn-failure empty-response` with `redispatch`): when the
connection is refused, and when it closes before any response. The second is safe to replay
because nothing was done yet: a scheduler sends a gRPC turn's headers before it runs anything, and
the HTTP gateway refuses a replayed session request (it already holds its messages, so the request
carries nothing new). A request over HAProxy's buffer (16 kB) is not replayed: its client sees 502.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from agentserve.cluster.ports import LocalPorts, SchedulerPorts

# A turn may stream for as long as the scheduler's own deadlines allow (10 minutes by default).
STREAM_TIMEOUT = "15m"
CHECK = "check inter 500ms fall 2 rise 1"
# Docker's embedded DNS server, in every container on a user-defined network.
DOCKER_DNS = "127.0.0.11:53"

# The servers of one backend: (which of SchedulerPorts' ports, what follows the address) -> lines.
Servers = Callable[[str, str], str]


@dataclass(frozen=True)
class Listeners:
    """Where HAProxy listens: the clients' HTTP and gRPC ports on `host`, the engines' internal port
    on `internal_host`; `health` (0: none) answers GET /healthz while a scheduler is up."""

    http: int
    grpc: int
    internal: int
    host: str = "127.0.0.1"
    internal_host: str = "127.0.0.1"
    health: int = 0


def haproxy_config(ports: LocalPorts, schedulers: int, listen_host: str = "127.0.0.1") -> str:
    """`up --local`: every scheduler on its own loopback ports."""
    instances = [ports.scheduler_instance(i) for i in range(schedulers)]

    def servers(port_of: str, extra: str) -> str:
        return "".join(
            f"    server scheduler-{i} 127.0.0.1:{getattr(own, port_of)}{extra} {CHECK}\n"
            for i, own in enumerate(instances)
        )

    listeners = Listeners(ports.http, ports.scheduler, ports.scheduler_internal, listen_host)
    return _config("agentserve up --local", listeners, servers)


def dns_haproxy_config(service: str, max_schedulers: int, ports: SchedulerPorts, health_port: int) -> str:
    """Compose: up to `max_schedulers` replicas of `service`, each at the same `ports`, as Docker's
    DNS lists them (re-resolved every second); HAProxy listens on those ports on every interface."""
    if max_schedulers < 1:
        raise ValueError(f"max_schedulers must be at least 1, got {max_schedulers}")

    def servers(port_of: str, extra: str) -> str:
        address = f"{service}:{getattr(ports, port_of)}"
        return (
            f"    server-template scheduler- 1-{max_schedulers} {address}{extra} {CHECK}"
            " resolvers docker resolve-prefer ipv4 init-addr none\n"
        )

    listeners = Listeners(ports.http, ports.grpc, ports.internal, "0.0.0.0", "0.0.0.0", health_port)
    resolvers = f"""
resolvers docker
    nameserver docker {DOCKER_DNS}
    accepted_payload_size 8192
    resolve_retries 3
    timeout resolve 1s
    timeout retry 1s
    hold valid 1s
    hold other 1s
    hold refused 1s
    hold nx 1s
    hold timeout 1s
    hold obsolete 1s
"""
    return _config("agentserve.cluster.compose_balancer", listeners, servers, resolvers)


def _config(writer: str, listen: Listeners, servers: Servers, resolvers: str = "") -> str:
    health = (
        f"""
frontend health
    bind {listen.host}:{listen.health}
    monitor-uri /healthz
    monitor fail if {{ nbsrv(schedulers-grpc) lt 1 }}
"""
        if listen.health
        else ""
    )
    return f"""# Written by {writer} (agentserve/cluster/balancer.py) at every start.
global
    log stdout format raw local0 notice
    maxconn 4096
{resolvers}
defaults
    log global
    mode http
    option httplog
    timeout connect 2s
    timeout client {STREAM_TIMEOUT}
    timeout server {STREAM_TIMEOUT}
    timeout tunnel {STREAM_TIMEOUT}
    timeout http-request 30s
    retries 3
    retry-on conn-failure empty-response
    option redispatch 1
    balance roundrobin
{health}
frontend openai
    bind {listen.host}:{listen.http}
    default_backend schedulers-http

frontend grpc
    bind {listen.host}:{listen.grpc} proto h2
    default_backend schedulers-grpc

frontend internal
    mode tcp
    option tcplog
    bind {listen.internal_host}:{listen.internal}
    default_backend schedulers-internal

backend schedulers-http
{servers("http", "")}
backend schedulers-grpc
{servers("grpc", " proto h2")}
backend schedulers-internal
    mode tcp
{servers("internal", "")}"""
