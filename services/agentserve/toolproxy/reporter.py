"""Tells the scheduler when a session starts and stops waiting on a tool (gRPC ToolCall* events).

Reporting is advisory: the scheduler uses it to offload and prefetch KV, but a tool call must
never wait for or fail because of it. Events go into a bounded queue that one background task
sends in order, so a call's Finished never overtakes its Started and a slow or absent scheduler
costs the tool call nothing. Failures are logged once per outage, not once per event.
"""

from __future__ import annotations

import asyncio
import logging

import grpc

from agentserve.common.channels import open_channel
from agentserve.common.internal_tls import InternalTLS
from agentserve.contracts import ToolCall
from agentserve.convert import tool_call_to_proto
from agentserve.toolproxy import metrics
from agentserve.v1 import scheduler_pb2_grpc

log = logging.getLogger(__name__)


class SchedulerReporter:
    def __init__(
        self, address: str, timeout_s: float = 2.0, max_pending: int = 10_000, tls: InternalTLS | None = None
    ) -> None:
        self._address = address  # the scheduler's internal port
        self._tls = tls
        self._timeout_s = timeout_s
        self._queue: asyncio.Queue[tuple[str, ToolCall]] = asyncio.Queue(max_pending)
        self._channel: grpc.aio.Channel | None = None
        self._task: asyncio.Task | None = None
        self._failures = 0
        self.sent = 0

    async def start(self) -> None:
        self._channel = open_channel(self._address, self._tls)
        stub = scheduler_pb2_grpc.SchedulerInternalStub(self._channel)
        self._task = asyncio.create_task(self._send_forever(stub), name="tool-event-reporter")

    def started(self, record: ToolCall) -> None:
        self._enqueue("ToolCallStarted", record)

    def finished(self, record: ToolCall) -> None:
        self._enqueue("ToolCallFinished", record)

    async def stop(self, drain_s: float = 2.0) -> None:
        """Send what is queued (up to `drain_s`), then close the channel."""
        if self._task is not None:
            try:
                await asyncio.wait_for(self._queue.join(), drain_s)
            except TimeoutError:
                log.warning("dropping %d unsent tool events at shutdown", self._queue.qsize())
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)
            self._task = None
        if self._channel is not None:
            await self._channel.close()
            self._channel = None

    def _enqueue(self, method: str, record: ToolCall) -> None:
        try:
            self._queue.put_nowait((method, record))
        except asyncio.QueueFull:
            metrics.EVENTS_UNDELIVERED.labels("queue_full").inc()
            log.warning("tool event queue full; dropped %s of call %s", method, record.call_id)

    async def _send_forever(self, stub: scheduler_pb2_grpc.SchedulerInternalStub) -> None:
        while True:
            method, record = await self._queue.get()
            try:
                await getattr(stub, method)(tool_call_to_proto(record), timeout=self._timeout_s)
                self.sent += 1
                if self._failures:
                    log.info("tool events reach the scheduler again after %d failures", self._failures)
                    self._failures = 0
            except grpc.aio.AioRpcError as exc:
                self._note_failure(method, record, f"{exc.code().name}: {exc.details()}")
            except Exception as exc:  # noqa: BLE001 - reporting must never stop
                self._note_failure(method, record, repr(exc))
            finally:
                self._queue.task_done()

    def _note_failure(self, method: str, record: ToolCall, reason: str) -> None:
        self._failures += 1
        metrics.EVENTS_UNDELIVERED.labels("rpc_failed").inc()
        level = logging.WARNING if self._failures == 1 else logging.DEBUG
        log.log(
            level,
            "%s for call %s (session %s) not delivered to %s: %s",
            method,
            record.call_id,
            record.session_id,
            self._address,
            reason,
        )
