"""Registrar: keeps an engine registered with the scheduler (register, heartbeat, re-register),
passes on the registered peers each reply carries (the engine's dial allow-list, peer_allowlist.py),
and takes a draining engine out of the registry.

The scheduler may start after the engine or restart and forget it; both are normal, so every
failure here is logged and retried, never fatal.

Draining (the engine's status says `draining`): the registrar heartbeats often, so the scheduler
learns at once, and asks to `Deregister` whenever the engine is idle (`idle()`). The scheduler says
no while it still has calls or turns on the engine; once it says yes, `deregistered` is set and
nothing more is sent. A draining engine registers with no scheduler that forgot it: an idle one
counts as deregistered when the scheduler does not know it or cannot be reached (it drops a silent
engine by timeout anyway).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable, Sequence

import grpc

from agentserve.common.channels import open_channel
from agentserve.common.internal_tls import InternalTLS
from agentserve.contracts import EngineStatus
from agentserve.convert import engine_status_to_proto
from agentserve.v1 import scheduler_pb2_grpc

log = logging.getLogger(__name__)

DRAIN_POLL_S = 0.2  # heartbeat and deregistration interval while draining


class Registrar:
    def __init__(
        self,
        scheduler_address: str,
        status: Callable[[], EngineStatus],
        interval_s: float,
        tls: InternalTLS | None = None,
        on_peers: Callable[[Sequence[str]], None] | None = None,
        on_drain: Callable[[], None] | None = None,
        idle: Callable[[], bool] | None = None,
    ):
        """`on_peers(addresses)`: the registered peers each reply carries (the engine's allow-list);
        `on_drain()`: the scheduler asks this engine to drain; `idle()`: nothing runs or waits here."""
        self._address = scheduler_address  # the scheduler's internal port
        self._tls = tls
        self._status = status
        self._interval_s = interval_s
        self._on_peers = on_peers or (lambda peers: None)
        self._on_drain = on_drain or (lambda: None)
        self._idle = idle or (lambda: True)
        self._task: asyncio.Task | None = None
        self._channel: grpc.aio.Channel | None = None
        self._wake = asyncio.Event()
        self.registered = asyncio.Event()
        self.deregistered = asyncio.Event()

    def start(self) -> None:
        self._channel = open_channel(self._address, self._tls)
        self._task = asyncio.create_task(
            self._run(scheduler_pb2_grpc.SchedulerInternalStub(self._channel)), name="registrar"
        )

    def wake(self) -> None:
        """Report now rather than at the next interval (the engine began draining)."""
        self._wake.set()

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
        while not self.deregistered.is_set():
            draining = self._status().draining
            try:
                if not known and not draining:
                    registered = await stub.Register(engine_status_to_proto(self._status()), timeout=5)
                    if registered.heartbeat_interval_ms:
                        self._interval_s = registered.heartbeat_interval_ms / 1000
                    self._on_peers(registered.peers)
                    known = True
                    self.registered.set()
                    log.info("registered with scheduler at %s", self._address)
                elif known:
                    beat = await stub.Heartbeat(engine_status_to_proto(self._status()), timeout=5)
                    self._on_peers(beat.peers)
                    known = beat.known
                    if beat.drain and not draining:
                        self._on_drain()
                        draining = True
                if draining and self._idle():
                    await self._deregister(stub, known)
            except grpc.aio.AioRpcError as exc:
                if known:
                    log.warning("heartbeat to %s failed: %s", self._address, exc.code().name)
                known = False
                if draining and self._idle():
                    self._left("the scheduler is unreachable")
            await self._pause(DRAIN_POLL_S if draining else self._interval_s)

    async def _deregister(self, stub: scheduler_pb2_grpc.SchedulerInternalStub, known: bool) -> None:
        if not known:
            self._left("the scheduler does not know this engine")
            return
        reply = await stub.Deregister(engine_status_to_proto(self._status()), timeout=5)
        if reply.deregistered:
            self._left("deregistered")

    def _left(self, why: str) -> None:
        log.info("drained: left the scheduler at %s (%s)", self._address, why)
        self.deregistered.set()

    async def _pause(self, seconds: float) -> None:
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._wake.wait(), seconds)
        self._wake.clear()
