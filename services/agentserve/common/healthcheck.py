"""Container health probe: ask the local gRPC server's standard health service.

Run by the image's HEALTHCHECK as ``python -m agentserve.common.healthcheck``. Exits 0 only when
``grpc.health.v1.Health/Check`` for the overall server (service ``""``) answers SERVING; any other
status, an unreachable port or a timeout exits 1. Servers report SERVING only after warm-up, so
this probe also says "ready", not just "listening".

It probes the service's internal-plane port: `AGENTSERVE_INTERNAL_PORT` where the service has one
(the scheduler, whose `AGENTSERVE_GRPC_PORT` faces clients), else `AGENTSERVE_GRPC_PORT`; with
`AGENTSERVE_INTERNAL_TLS_DIR` set it presents the service's own certificate there (mutual TLS).

Docker runs the probe every few seconds in every container for as long as it runs, so it imports
only the standard library: it speaks the one unary call on HTTP/2 itself (`grpc_wire`) instead of
loading grpcio, which costs several times the call in interpreter time at each probe.

Env:
    AGENTSERVE_INTERNAL_PORT      the scheduler's internal port, probed when set
    AGENTSERVE_GRPC_PORT          port on localhost to probe otherwise (default 50051)
    AGENTSERVE_INTERNAL_TLS_DIR   the service's internal-plane credentials (empty: plain)
    AGENTSERVE_HEALTHCHECK_TIMEOUT_S  seconds before giving up (default 2)
"""

from __future__ import annotations

import os
import sys

from agentserve.common.grpc_wire import WireError, unary_call

DEFAULT_PORT = 50051
DEFAULT_TIMEOUT_S = 2.0
CHECK_METHOD = "/grpc.health.v1.Health/Check"
# HealthCheckResponse{status: SERVING}: field 1 (varint) = 1.
SERVING_REPLY = b"\x08\x01"


def _health_request(service: str) -> bytes:
    """HealthCheckRequest{service}: field 1 (length-delimited); the empty name is the empty message."""
    name = service.encode()
    if not name:
        return b""
    if len(name) > 127:
        raise ValueError(f"service: a name of at most 127 bytes, got {len(name)}")
    return b"\x0a" + bytes([len(name)]) + name


def check(target: str, service: str = "", timeout_s: float = DEFAULT_TIMEOUT_S, tls_dir: str = "") -> bool:
    """Return True when the server at ``target`` (host:port) reports ``service`` as SERVING, asked
    over mutual TLS with the credentials in ``tls_dir`` (common/internal_tls.py's layout) when set."""
    try:
        reply = unary_call(target, CHECK_METHOD, _health_request(service), timeout_s, tls_dir)
    except (OSError, WireError):
        return False
    return reply == SERVING_REPLY


def main() -> int:
    port = int(os.environ.get("AGENTSERVE_INTERNAL_PORT") or os.environ.get("AGENTSERVE_GRPC_PORT") or DEFAULT_PORT)
    timeout_s = float(os.environ.get("AGENTSERVE_HEALTHCHECK_TIMEOUT_S", DEFAULT_TIMEOUT_S))
    tls_dir = os.environ.get("AGENTSERVE_INTERNAL_TLS_DIR", "")
    target = f"localhost:{port}"
    if check(target, timeout_s=timeout_s, tls_dir=tls_dir):
        return 0
    print(f"{target}: not SERVING", file=sys.stderr)
    return 1


if __name__ == "__main__":
    sys.exit(main())
