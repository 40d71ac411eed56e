"""Registrar: keeps an engine registered with the scheduler (register, heartbeat, re-register), and
passes on the registered peers each reply carries (the engine's dial allow-list, peer_allowlist.py).

The scheduler may start after the engine or restart and forget it; both are normal, so every
failure here is logged and retried, never fatal.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Sequence

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
        on_peers: Callable[[Sequence[str]], None] | None = None,
    ):
        """`on_peers(addresses)`: the registered peers each reply carries (the engine's allow-list)."""
        self._address = scheduler_address  # the scheduler's internal port
        self._tls = tls
        self._status = status
        self._interval_s = interval_s
        self._on_peers = on_peers or (lambda peers: None)
        self._task: asyncio.Task | None = None
        self._channel: grpc.aio.Channel | None = None
        self.registered = asyncio.Event()

    def start(self) -> None:
        self._channel = open_channel(self._address, self._tls)
        self._task = asyncio.create_task(
            self._run(scheduler_pb2_grpc.SchedulerInternalStub(self._channel)), name="registrar"
        )

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            try:
                await self._task
            except asyncio.CancelledError:
                pass
        if self._channel is not None:
            await self._channel.close()

    async def peers_now(self) -> list[str]:
        """The registered peers, asked of the scheduler now: a heartbeat out of turn (an engine asked
        to dial an address it does not know yet). Raises the call's error; [] before `start`."""
        if self._channel is None:
            return []
        stub = scheduler_pb2_grpc.SchedulerInternalStub(self._channel)
        reply = await stub.Heartbeat(engine_status_to_proto(self._status()), timeout=5)
        self._on_peers(reply.peers)
        return list(reply.peers)

    async def _run(self, stub: scheduler_pb2_grpc.SchedulerInternalStub) -> None:
        known = False
        while True:
            try:
                if not known:
                    registered = await stub.Register(engine_status_to_proto(self._status()), timeout=5)
                    if registered.heartbeat_interval_ms:
                        self._interval_s = registered.heartbeat_interval_ms / 1000
                    self._on_peers(registered.peers)
                    known = True
                    self.registered.set()
                    log.info("registered with scheduler at %s", self._address)
                else:
                    beat = await stub.Heartbeat(engine_status_to_proto(self._status()), timeout=5)
                    self._on_peers(beat.peers)
                    known = beat.known
            except grpc.aio.AioRpcError as exc:
                if known:
                    log.warning("heartbeat to %s failed: %s", self._address, exc.code().name)
                known = False
            await asyncio.sleep(self._interval_s)
