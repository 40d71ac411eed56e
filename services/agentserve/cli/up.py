"""What `agentserve up --local` prints once its cluster serves (the cluster is `agentserve.cluster`)."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

from agentserve.cluster.local import keys_of
from agentserve.cluster.ports import LOOPBACK, LocalPorts


def ready_line(ports: LocalPorts, env: Mapping[str, str], listen_host: str = LOOPBACK) -> str:
    """The one line `up --local` prints once everything serves: where each endpoint is, and who
    can reach it."""
    otlp = env.get("OTEL_EXPORTER_OTLP_ENDPOINT")
    tracing = (
        f"traces to {otlp} (UI {env.get('AGENTSERVE_TRACING_UI', 'http://127.0.0.1:6006')})"
        if otlp
        else "tracing off (set OTEL_EXPORTER_OTLP_ENDPOINT)"
    )
    keys = keys_of(env)
    access = (
        f"API keys: {len(keys.tenants)} tenants"
        if keys.enabled
        else "loopback only, no API keys (set AGENTSERVE_API_KEYS to authenticate clients)"
    )
    host = LOOPBACK if listen_host in ("0.0.0.0", "::") else listen_host
    return (
        f"agentserve: ready. OpenAI http://{host}:{ports.http}/v1 | gRPC {host}:{ports.scheduler} | "
        f"tools http://{host}:{ports.toolproxy_http}/tools/<name> | "
        f"metrics http://127.0.0.1:{ports.metrics}/metrics | {access} | {tracing}"
    )


def drain_hint(ports: LocalPorts, certs: Path | None) -> str:
    """How to scale in one of the engines `up --local` started (`agentserve drain`)."""
    tls = f" --tls-dir {certs / 'operator'}" if certs is not None else " --plain"
    return (
        f"agentserve: scale in with `agentserve drain ENGINE --scheduler 127.0.0.1:{ports.scheduler_internal}{tls}` "
        "(ENGINE: an engine id from the scheduler's log or a turn's metadata)"
    )
