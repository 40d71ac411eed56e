"""Container health probe: ask the local gRPC server's standard health service.

Run by the image's HEALTHCHECK as ``python -m agentserve.common.healthcheck``. Exits 0 only when
``grpc.health.v1.Health/Check`` for the overall server (service ``""``) answers SERVING; any other
status, an unreachable port or a timeout exits 1. Servers report SERVING only after warm-up, so
this probe also says "ready", not just "listening".

It probes the service's internal-plane port: `AGENTSERVE_INTERNAL_PORT` where the service has one
(the scheduler, whose `AGENTSERVE_GRPC_PORT` faces clients), else `AGENTSERVE_GRPC_PORT`; with
`AGENTSERVE_INTERNAL_TLS_DIR` set it presents the service's own certificate there (mutual TLS).

Env:
    AGENTSERVE_INTERNAL_PORT      the scheduler's internal port, probed when set
    AGENTSERVE_GRPC_PORT          port on localhost to probe otherwise (default 50051)
    AGENTSERVE_INTERNAL_TLS_DIR   the service's internal-plane credentials (empty: plain)
    AGENTSERVE_HEALTHCHECK_TIMEOUT_S  seconds before giving up (default 2)
"""

from __future__ import annotations

import os
import sys

import grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc

from agentserve.common.internal_tls import InternalTLS

DEFAULT_PORT = 50051
DEFAULT_TIMEOUT_S = 2.0


def _channel(target: str, tls: InternalTLS | None) -> grpc.Channel:
    if tls is None:
        return grpc.insecure_channel(target)
    return grpc.secure_channel(target, tls.channel_credentials(), options=tls.channel_options())


def check(target: str, service: str = "", timeout_s: float = DEFAULT_TIMEOUT_S, tls: InternalTLS | None = None) -> bool:
    """Return True when the server at ``target`` reports ``service`` as SERVING (asked over mutual
    TLS with ``tls``)."""
    with _channel(target, tls) as channel:
        stub = health_pb2_grpc.HealthStub(channel)
        try:
            response = stub.Check(health_pb2.HealthCheckRequest(service=service), timeout=timeout_s)
        except grpc.RpcError:
            return False
    return response.status == health_pb2.HealthCheckResponse.SERVING


def main() -> int:
    port = int(os.environ.get("AGENTSERVE_INTERNAL_PORT") or os.environ.get("AGENTSERVE_GRPC_PORT") or DEFAULT_PORT)
    timeout_s = float(os.environ.get("AGENTSERVE_HEALTHCHECK_TIMEOUT_S", DEFAULT_TIMEOUT_S))
    tls_dir = os.environ.get("AGENTSERVE_INTERNAL_TLS_DIR", "")
    target = f"localhost:{port}"
    if check(target, timeout_s=timeout_s, tls=InternalTLS.load(tls_dir) if tls_dir else None):
        return 0
    print(f"{target}: not SERVING", file=sys.stderr)
    return 1


if __name__ == "__main__":
    sys.exit(main())
