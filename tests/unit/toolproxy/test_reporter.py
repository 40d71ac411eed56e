"""The event reporter sends in order, survives scheduler failures and never blocks a call."""

from __future__ import annotations

import asyncio
import logging

import grpc
import pytest

from agentserve.contracts import ToolCall
from agentserve.convert import tool_call_to_proto
from agentserve.toolproxy.reporter import SchedulerReporter

pytestmark = pytest.mark.unit


class FlakyStub:
    """A SchedulerInternalStub stand-in: the first call fails like an unreachable scheduler."""

    def __init__(self) -> None:
        self.received: list[tuple[str, str]] = []
        self.calls = 0

    async def _handle(self, method: str, event) -> None:
        self.calls += 1
        if self.calls == 1:
            raise grpc.aio.AioRpcError(
                grpc.StatusCode.UNAVAILABLE, grpc.aio.Metadata(), grpc.aio.Metadata(), "connection refused"
            )
        self.received.append((method, event.call_id))

    async def ToolCallStarted(self, event, timeout=None):
        await self._handle("started", event)

    async def ToolCallFinished(self, event, timeout=None):
        await self._handle("finished", event)


def test_events_go_in_order_and_failures_are_logged_not_raised(caplog):
    async def main():
        reporter = SchedulerReporter("127.0.0.1:1")
        stub = FlakyStub()
        task = asyncio.create_task(reporter._send_forever(stub))
        for call in ("c0", "c1", "c2"):
            record = ToolCall("s", "sleep", call, 1.0, 0.5)
            reporter.started(record)
            reporter.finished(record)
        await asyncio.wait_for(reporter._queue.join(), 5)
        task.cancel()
        return stub, reporter

    with caplog.at_level(logging.WARNING):
        stub, reporter = asyncio.run(main())
    assert stub.received == [
        ("finished", "c0"),
        ("started", "c1"),
        ("finished", "c1"),
        ("started", "c2"),
        ("finished", "c2"),
    ]
    assert reporter.sent == 5
    assert "UNAVAILABLE: connection refused" in caplog.text


def test_record_to_proto():
    event = tool_call_to_proto(ToolCall("s", "t", "c", 12.5, 0.25, 0.75, True))
    assert (
        event.session_id,
        event.tool,
        event.call_id,
        event.start_unix_s,
        event.predicted_duration_s,
        event.actual_duration_s,
        event.ok,
    ) == ("s", "t", "c", 12.5, 0.25, 0.75, True)


def test_full_queue_drops_instead_of_blocking(caplog):
    async def main():
        reporter = SchedulerReporter("127.0.0.1:1", max_pending=1)
        record = ToolCall("s", "t", "c", 0.0, 0.0)
        reporter.started(record)
        reporter.finished(record)
        return reporter._queue.qsize()

    assert asyncio.run(main()) == 1 and "queue full" in caplog.text
