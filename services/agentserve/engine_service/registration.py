"""Registrar: keeps an engine registered with the scheduler (register, heartbeat, re-register).

The scheduler may start after the engine or restart and forget it; both are normal, so every
failure here is logged and retried, never fatal.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable

import grpc

from agentserve.common.channels import open_channel
from agentserve.common.internal_tls import InternalTLS
from agentserve.contracts import EngineStatus
from agentserve.convert import engine_status_to_proto
from agentserve.v1 import scheduler_pb2_grpc

log = logging.getLogger(__name__)


class Registrar:
    def __init__(
        self,
        scheduler_address: str,
        status: Callable[[], EngineStatus],
        interval_s: float,
        tls: InternalTLS | None = None,
    ):
        self._address = scheduler_address  # the scheduler's internal port
        self._tls = tls
        self._status = status
        self._interval_s = interval_s
        self._task: asyncio.Task | None = None
        self.registered = asyncio.Event()

    def start(self) -> None:
        self._task = asyncio.create_task(self._run(), name="registrar")

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            try:
                await self._task
            except asyncio.CancelledError:
                pass

    async def _run(self) -> None:
        async with open_channel(self._address, self._tls) as channel:
            stub = scheduler_pb2_grpc.SchedulerInternalStub(channel)
            known = False
            while True:
                try:
                    if not known:
                        reply = await stub.Register(engine_status_to_proto(self._status()), timeout=5)
                        if reply.heartbeat_interval_ms:
                            self._interval_s = reply.heartbeat_interval_ms / 1000
                        known = True
                        self.registered.set()
                        log.info("registered with scheduler at %s", self._address)
                    else:
                        known = (await stub.Heartbeat(engine_status_to_proto(self._status()), timeout=5)).known
                except grpc.aio.AioRpcError as exc:
                    if known:
                        log.warning("heartbeat to %s failed: %s", self._address, exc.code().name)
                    known = False
                await asyncio.sleep(self._interval_s)
