"""HAProxy's configuration in front of several schedulers (`up --local --schedulers N`).

It keeps the endpoints of one scheduler: the clients' OpenAI HTTP port and gRPC port (HTTP/2,
proxied as HTTP so each call, not each connection, is balanced), and the engines' and tool proxy's
internal port (TCP: its mutual TLS is end to end, HAProxy never sees inside). Calls go round-robin;
no stickiness is needed: a scheduler that receives a session it does not run forwards it to the one
that does (`scheduler/forwarding.py`). Streams (a turn's tokens) may last as long as a turn does.

A scheduler that dies is marked down by the health checks within a second; until then a request
sent to it is retried on another (`retry-on conn-failure empty-response` with `redispatch`): when the
connection is refused, and when it closes before any response. The second is safe to replay
because nothing was done yet: a scheduler sends a gRPC turn's headers before it runs anything, and
the HTTP gateway refuses a replayed session request (it already holds its messages, so the request
carries nothing new). A request over HAProxy's buffer (16 kB) is not replayed: its client sees 502.
"""

from __future__ import annotations

from agentserve.cluster.ports import LocalPorts

# A turn may stream for as long as the scheduler's own deadlines allow (10 minutes by default).
STREAM_TIMEOUT = "15m"


def haproxy_config(ports: LocalPorts, schedulers: int, listen_host: str = "127.0.0.1") -> str:
    instances = [ports.scheduler_instance(i) for i in range(schedulers)]

    def servers(port_of: str, extra: str = "") -> str:
        return "".join(
            f"    server scheduler-{i} 127.0.0.1:{getattr(own, port_of)}{extra} check inter 500ms fall 2 rise 1\n"
            for i, own in enumerate(instances)
        )

    return f"""# Written by agentserve up --local (agentserve/cluster/balancer.py) at every start.
global
    log stdout format raw local0 notice
    maxconn 4096

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

frontend openai
    bind {listen_host}:{ports.http}
    default_backend schedulers-http

frontend grpc
    bind {listen_host}:{ports.scheduler} proto h2
    default_backend schedulers-grpc

frontend internal
    mode tcp
    option tcplog
    bind 127.0.0.1:{ports.scheduler_internal}
    default_backend schedulers-internal

backend schedulers-http
{servers("http")}
backend schedulers-grpc
{servers("grpc", " proto h2")}
backend schedulers-internal
    mode tcp
{servers("internal")}"""
