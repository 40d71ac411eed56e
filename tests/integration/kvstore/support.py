"""Start kvstore processes on loopback and drive them with a client, for the kvstore integration tests."""

from __future__ import annotations

import asyncio

from agentserve.kvstore.client import KVStoreClient
from tests.support.processes import ServiceProcess, free_port, start_service


def start_kvstore(data_dir, metrics_port: int = 0, *extra: str) -> ServiceProcess:
    port = free_port()
    args = [
        "--host",
        "127.0.0.1",
        "--grpc-port",
        str(port),
        "--data-dir",
        str(data_dir),
        "--metrics-port",
        str(metrics_port),
        *extra,
    ]
    service = start_service("kvstore", "agentserve.kvstore", args, port)
    service.extra_ports["metrics"] = metrics_port
    return service


def run(coro_fn, address: str):
    """Run `coro_fn(client)` with a fresh KVStoreClient on its own event loop."""

    async def main():
        async with KVStoreClient(address, timeout_s=30) as client:
            return await coro_fn(client)

    return asyncio.run(main())


async def collect(aiterator) -> list:
    return [item async for item in aiterator]
