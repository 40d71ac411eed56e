"""`python -m agentserve.cluster.compose_balancer`: HAProxy in front of compose's scheduler replicas
(docker-compose.schedulers.yml, `--scale scheduler=N`).

Writes `balancer.dns_haproxy_config` for the replicas of `--service` on the scheduler's usual ports
(gRPC 50051, HTTP 8000, internal 50061), which HAProxy then listens on itself, and execs HAProxy
(Debian's, in the image) in the foreground: the container is HAProxy from then on. Replicas are
found in Docker's DNS, so scaling the schedulers needs no restart here; `--max-schedulers` bounds
how many are served at once.
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
from pathlib import Path

from agentserve.cluster.balancer import dns_haproxy_config
from agentserve.cluster.ports import SchedulerPorts


def main(argv: list[str]) -> None:
    parser = argparse.ArgumentParser(prog="python -m agentserve.cluster.compose_balancer")
    parser.add_argument("--service", default="scheduler", help="the schedulers' name in Docker's DNS")
    parser.add_argument("--max-schedulers", type=int, default=8, help="server slots per backend")
    parser.add_argument("--grpc-port", type=int, default=50051)
    parser.add_argument("--http-port", type=int, default=8000)
    parser.add_argument("--internal-port", type=int, default=50061)
    parser.add_argument("--health-port", type=int, default=8404, help="GET /healthz: 200 while a scheduler is up")
    parser.add_argument("--config", type=Path, default=Path("/tmp/haproxy.cfg"), help="where the config is written")
    args = parser.parse_args(argv)
    try:
        ports = SchedulerPorts(args.grpc_port, args.internal_port, args.http_port, 0)
        config = dns_haproxy_config(args.service, args.max_schedulers, ports, args.health_port)
    except ValueError as exc:
        parser.error(str(exc))
    if shutil.which("haproxy") is None:
        sys.exit("haproxy is not installed (images/Dockerfile installs Debian's)")
    args.config.write_text(config)
    os.execvp("haproxy", ["haproxy", "-db", "-f", str(args.config)])


if __name__ == "__main__":
    main(sys.argv[1:])
