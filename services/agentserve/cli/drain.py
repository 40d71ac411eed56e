"""`agentserve drain ENGINE`: scale in one engine of a running deployment.

It calls the scheduler's `SchedulerInternal.DrainEngine` on its internal port, with an `operator`
certificate where the internal plane runs mutual TLS (only that role may drain): the scheduler
places no new turn on the engine and tells it, with its next heartbeat reply, to finish its turns,
deregister and exit. With `--wait` it asks again until the scheduler no longer knows the engine.
A bad engine name is the scheduler's NOT_FOUND, naming the registered engines.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import time
from pathlib import Path

import grpc

from agentserve.common.channels import open_channel
from agentserve.common.internal_tls import InternalTLS
from agentserve.v1 import common_pb2, scheduler_pb2, scheduler_pb2_grpc

DEFAULT_SCHEDULER = "127.0.0.1:50061"  # up --local's internal port
POLL_S = 0.5
REQUEST_ERRORS = (grpc.StatusCode.INVALID_ARGUMENT, grpc.StatusCode.NOT_FOUND, grpc.StatusCode.FAILED_PRECONDITION)


def default_tls_dir() -> Path | None:
    """`up --local`'s operator certificate, when its default data directory has one."""
    from agentserve.cluster.commands import cert_root
    from agentserve.model_files.tokenizer_files import models_home

    path = cert_root(models_home().parent / "kvstore-local") / "operator"
    return path if path.is_dir() else None


def drain(args: argparse.Namespace) -> int:
    tls_dir = None if args.plain else (args.tls_dir or default_tls_dir())
    tls = InternalTLS.load(str(tls_dir), "--tls-dir") if tls_dir else None
    try:
        return asyncio.run(_drain(args.scheduler, args.engine, tls, args.wait, args.timeout))
    except grpc.aio.AioRpcError as exc:
        print(f"agentserve: error: {exc.code().name}: {exc.details()}", file=sys.stderr)
        return 2 if exc.code() in REQUEST_ERRORS else 1


async def _drain(address: str, engine: str, tls: InternalTLS | None, wait: bool, timeout_s: float) -> int:
    async with open_channel(address, tls) as channel:
        stub = scheduler_pb2_grpc.SchedulerInternalStub(channel)
        reply = await stub.DrainEngine(scheduler_pb2.DrainEngineRequest(engine=engine), timeout=10)
        role = common_pb2.EngineRole.Name(reply.role).removeprefix("ENGINE_ROLE_").lower()
        print(f"agentserve: draining {role} engine {reply.engine_id}: no new turns; {reply.busy} calls and turns on it")
        deadline = time.monotonic() + timeout_s
        while wait:
            await asyncio.sleep(POLL_S)
            try:
                await stub.DrainEngine(scheduler_pb2.DrainEngineRequest(engine=reply.engine_id), timeout=10)
            except grpc.aio.AioRpcError as exc:
                if exc.code() is not grpc.StatusCode.NOT_FOUND:
                    raise
                print(f"agentserve: {reply.engine_id} finished its turns and deregistered")
                return 0
            if time.monotonic() > deadline:
                print(f"agentserve: {reply.engine_id} still registered after {timeout_s:.0f} s", file=sys.stderr)
                return 1
        return 0
