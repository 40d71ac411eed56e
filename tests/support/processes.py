"""Start real agentserve services as local processes for integration tests."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc

from agentserve.common.netutil import free_port  # noqa: F401 - also imported from here

LOG_DIR = Path(os.environ.get("AGENTSERVE_TEST_LOGS", "/tmp/agentserve-test-logs"))


def wait_serving(
    address: str, timeout_s: float = 120.0, proc: subprocess.Popen | None = None, log: Path | None = None
) -> None:
    """Block until gRPC health at `address` reports SERVING (the service warmed up)."""
    deadline = time.monotonic() + timeout_s
    with grpc.insecure_channel(address) as channel:
        stub = health_pb2_grpc.HealthStub(channel)
        while time.monotonic() < deadline:
            if proc is not None and proc.poll() is not None:
                tail = log.read_text()[-3000:] if log and log.exists() else ""
                raise RuntimeError(f"service at {address} exited with {proc.returncode}:\n{tail}")
            try:
                if (
                    stub.Check(health_pb2.HealthCheckRequest(), timeout=1).status
                    == health_pb2.HealthCheckResponse.SERVING
                ):
                    return
            except grpc.RpcError:
                pass
            time.sleep(0.2)
    raise TimeoutError(f"service at {address} not SERVING after {timeout_s}s")


@dataclass
class ServiceProcess:
    name: str
    grpc_port: int
    proc: subprocess.Popen
    log: Path
    extra_ports: dict[str, int] = field(default_factory=dict)

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.grpc_port}"

    def stop(self, sig: int = signal.SIGTERM, timeout_s: float = 15.0) -> int:
        if self.proc.poll() is None:
            self.proc.send_signal(sig)
            try:
                self.proc.wait(timeout_s)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        return self.proc.returncode


def start_service(
    name: str,
    module: str,
    args: list[str],
    grpc_port: int,
    env: dict[str, str] | None = None,
    wait: bool = True,
    timeout_s: float = 120.0,
) -> ServiceProcess:
    """`python -m module args...`, logging to LOG_DIR/name.log; waits for SERVING unless told not to."""
    LOG_DIR.mkdir(parents=True, exist_ok=True)
    log = LOG_DIR / f"{name}-{grpc_port}.log"
    full_env = {**os.environ, "PYTHONUNBUFFERED": "1", **(env or {})}
    with log.open("w") as out:
        proc = subprocess.Popen(
            [sys.executable, "-m", module, *args], stdout=out, stderr=subprocess.STDOUT, env=full_env
        )
    service = ServiceProcess(name, grpc_port, proc, log)
    if wait:
        try:
            wait_serving(service.address, timeout_s, proc, log)
        except BaseException:
            service.stop(signal.SIGKILL)
            raise
    return service
