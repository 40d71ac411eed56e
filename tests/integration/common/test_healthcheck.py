"""The container health probe (`python -m agentserve.common.healthcheck`, standard library only)
against a real gRPC server's health service over loopback, plain and over the internal plane's
mutual TLS: True exactly when the asked service is SERVING, False for every other answer, for a
server that refuses the probe's certificate, and for a closed port."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import grpc
import pytest
from grpc_health.v1 import health, health_pb2, health_pb2_grpc

from agentserve.common.certs import ensure_certs
from agentserve.common.healthcheck import check
from agentserve.common.internal_tls import InternalTLS
from agentserve.common.netutil import free_port

pytestmark = pytest.mark.integration

SERVICE = "agentserve.v1.Decode"


@asynccontextmanager
async def health_server(tls: InternalTLS | None) -> AsyncIterator[tuple[str, health.aio.HealthServicer]]:
    servicer = health.aio.HealthServicer()
    server = grpc.aio.server()
    health_pb2_grpc.add_HealthServicer_to_server(servicer, server)
    address = f"127.0.0.1:{free_port()}"
    if tls is None:
        server.add_insecure_port(address)
    else:
        server.add_secure_port(address, tls.server_credentials())
    await server.start()
    try:
        yield address, servicer
    finally:
        await server.stop(None)


def _answers(address: str, tls_dir: str) -> list[bool]:
    return [check(address, tls_dir=tls_dir), check(address, SERVICE, tls_dir=tls_dir)]


async def _statuses(tls: InternalTLS | None, tls_dir: str) -> dict[str, list[bool]]:
    """check() on the server ("") and on SERVICE as their statuses change."""
    async with health_server(tls) as (address, servicer):
        seen = {"unknown service": await asyncio.to_thread(_answers, address, tls_dir)}
        await servicer.set("", health_pb2.HealthCheckResponse.NOT_SERVING)
        await servicer.set(SERVICE, health_pb2.HealthCheckResponse.NOT_SERVING)
        seen["not serving"] = await asyncio.to_thread(_answers, address, tls_dir)
        await servicer.set("", health_pb2.HealthCheckResponse.SERVING)
        seen["server serving"] = await asyncio.to_thread(_answers, address, tls_dir)
        await servicer.set(SERVICE, health_pb2.HealthCheckResponse.SERVING)
        seen["both serving"] = await asyncio.to_thread(_answers, address, tls_dir)
    seen["closed"] = _answers(address, tls_dir)
    return seen


EXPECTED = {
    "unknown service": [True, False],  # the health servicer starts the server ("") SERVING
    "not serving": [False, False],
    "server serving": [True, False],
    "both serving": [True, True],
    "closed": [False, False],
}


def test_plain_probe_is_true_exactly_when_the_service_is_serving() -> None:
    assert asyncio.run(_statuses(None, "")) == EXPECTED


def test_mutual_tls_probe_is_true_exactly_when_the_service_is_serving(tmp_path: Path) -> None:
    ensure_certs(tmp_path, ["decode", "kvstore"])
    server_tls = InternalTLS.load(str(tmp_path / "decode"))
    assert asyncio.run(_statuses(server_tls, str(tmp_path / "kvstore"))) == EXPECTED


def test_a_server_of_another_ca_or_a_probe_without_tls_is_not_serving(tmp_path: Path) -> None:
    ensure_certs(tmp_path / "ours", ["decode"])
    ensure_certs(tmp_path / "theirs", ["decode"])
    server_tls = InternalTLS.load(str(tmp_path / "ours" / "decode"))

    async def main() -> list[bool]:
        async with health_server(server_tls) as (address, _):
            return [
                await asyncio.to_thread(check, address, tls_dir=str(tmp_path / "theirs" / "decode")),
                await asyncio.to_thread(check, address),
                await asyncio.to_thread(check, address, tls_dir=str(tmp_path / "ours" / "decode")),
            ]

    assert asyncio.run(main()) == [False, False, True]


def test_the_probe_command_exits_0_only_when_serving_and_loads_no_grpcio(tmp_path: Path) -> None:
    ensure_certs(tmp_path, ["kvstore"])
    tls_dir = str(tmp_path / "kvstore")
    program = (
        "import runpy, sys\n"
        "try:\n"
        "    runpy.run_module('agentserve.common.healthcheck', run_name='__main__')\n"
        "finally:\n"
        "    print('grpc' in sys.modules)\n"
    )

    def probe(port: int) -> tuple[int, str]:
        env = {**os.environ, "AGENTSERVE_GRPC_PORT": str(port), "AGENTSERVE_INTERNAL_TLS_DIR": tls_dir}
        env.pop("AGENTSERVE_INTERNAL_PORT", None)
        done = subprocess.run([sys.executable, "-c", program], env=env, capture_output=True, text=True, timeout=60)
        return done.returncode, done.stdout.strip()

    async def main() -> list[tuple[int, str]]:
        async with health_server(InternalTLS.load(tls_dir)) as (address, servicer):
            port = int(address.rpartition(":")[2])
            serving = await asyncio.to_thread(probe, port)
            await servicer.set("", health_pb2.HealthCheckResponse.NOT_SERVING)
            return [serving, await asyncio.to_thread(probe, port)]

    assert asyncio.run(main()) == [(0, "False"), (1, "False")]
