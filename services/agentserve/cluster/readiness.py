"""When a local cluster's service is ready: gRPC health SERVING, and the scheduler's HTTP `/health`
200 (a prefill and a decode engine registered). Both polls fail fast when the process exits."""

from __future__ import annotations

import json
import time
import urllib.error
import urllib.request

import grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc

from agentserve.cluster.process import Proc
from agentserve.common.internal_tls import InternalTLS


def health_channel(port: int, tls: InternalTLS | None = None) -> grpc.Channel:
    """A blocking channel to a local port, with the internal plane's credentials when it is on it."""
    target = f"127.0.0.1:{port}"
    if tls is None:
        return grpc.insecure_channel(target)
    return grpc.secure_channel(target, tls.channel_credentials(), options=tls.channel_options())


class ExitedEarly(RuntimeError):
    """A service exited before it was ready; the message ends with the tail of its log."""

    def __init__(self, proc: Proc) -> None:
        self.name, self.returncode = proc.name, proc.popen.returncode
        where = f" (log: {proc.log})" if proc.log is not None else ""
        tail = proc.log_tail()
        super().__init__(
            f"{proc.name} exited with code {self.returncode}{where}" + (f"; its log ends:\n{tail}" if tail else "")
        )


def wait_serving(proc: Proc, timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    with health_channel(proc.grpc_port, proc.tls) as channel:
        stub = health_pb2_grpc.HealthStub(channel)
        while time.monotonic() < deadline:
            if proc.popen.poll() is not None:
                raise ExitedEarly(proc)
            try:
                reply = stub.Check(health_pb2.HealthCheckRequest(), timeout=1)
                if reply.status == health_pb2.HealthCheckResponse.SERVING:
                    return
            except grpc.RpcError:
                pass
            time.sleep(0.2)
    raise TimeoutError(f"{proc.name} did not become SERVING within {timeout_s:.0f}s")


def http_health(port: int) -> tuple[int, dict]:
    """(status, JSON body) of the scheduler's `/health`; status 0 if it does not answer."""
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=2) as reply:
            return reply.status, json.loads(reply.read())
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read() or b"{}")
    except (OSError, ValueError):
        return 0, {}


def wait_ready(proc: Proc, http_port: int, timeout_s: float) -> None:
    """Until the scheduler's `/health` is 200: a prefill and a decode engine registered."""
    deadline = time.monotonic() + timeout_s
    body: dict = {}
    while time.monotonic() < deadline:
        if proc.popen.poll() is not None:
            raise ExitedEarly(proc)
        status, body = http_health(http_port)
        if status == 200:
            return
        time.sleep(0.2)
    raise TimeoutError(f"the scheduler was not ready within {timeout_s:.0f}s: {body.get('message', 'no answer')}")
