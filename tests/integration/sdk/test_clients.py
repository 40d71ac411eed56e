"""The async and sync clients against an in-process fake scheduler and the real tool proxy app."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Iterator

import grpc
import pytest
from aiohttp import web

from agentserve.sdk import (
    AsyncClient,
    AsyncSession,
    Client,
    InvalidRequestError,
    RetryableError,
    SessionClosed,
    SessionNotFound,
    ToolCallError,
    TurnMetadata,
)
from agentserve.toolproxy.http_app import build_app
from agentserve.toolproxy.predictor import ToolDurationPredictor
from agentserve.toolproxy.proxy import ToolProxy
from agentserve.toolproxy.tools import ToolRegistry, UpstreamClient
from agentserve.v1 import scheduler_pb2, scheduler_pb2_grpc
from tests.support.processes import free_port

pytestmark = pytest.mark.integration

REPLY = ["Hel", "lo", "!"]


class FakeScheduler(scheduler_pb2_grpc.SchedulerServicer):
    """Sessions "s-N"; a turn streams REPLY; magic messages fail the way the real scheduler does."""

    def __init__(self) -> None:
        self.opened: list[scheduler_pb2.OpenSessionRequest] = []
        self.turns: list[scheduler_pb2.TurnRequest] = []
        self.cancelled = asyncio.Event()

    async def OpenSession(self, request, context):
        self.opened.append(request)
        return scheduler_pb2.OpenSessionResponse(session_id=f"s-{len(self.opened)}")

    async def Turn(self, request, context):
        self.turns.append(request)
        if request.session_id == "ghost":
            await context.abort(grpc.StatusCode.NOT_FOUND, "unknown session ghost")
        if request.message == "bad":
            await context.abort(grpc.StatusCode.INVALID_ARGUMENT, "max_tokens too large")
        metadata = scheduler_pb2.TurnMetadata(
            turn_id="t1",
            turn_index=len(self.turns) - 1,
            prompt_tokens=40,
            cached_tokens=32,
            prefill_engine="p0",
            decode_engine="d1",
            trace_id="ab" * 16,
            span_id=f"{len(self.turns):016x}",
        )
        yield scheduler_pb2.TurnChunk(metadata=metadata)
        for i, text in enumerate(REPLY):
            if request.message == "dies" and i == 1:
                await context.abort(grpc.StatusCode.UNAVAILABLE, "decode engine died")
            yield scheduler_pb2.TurnChunk(token_ids=[10 + i], text=text)
            if request.message == "endless":
                try:
                    await asyncio.sleep(30)
                except asyncio.CancelledError:
                    self.cancelled.set()
                    raise
        yield scheduler_pb2.TurnChunk(finished=True, finish_reason="stop", completion_tokens=len(REPLY))

    async def CloseSession(self, request, context):
        return scheduler_pb2.CloseSessionResponse(turns=len(self.turns), tokens=99)

    async def ListModels(self, request, context):
        return scheduler_pb2.ListModelsResponse(models=["tiny-llama"])


class Servers:
    """The fake scheduler (gRPC) and the tool proxy app (HTTP) on a background loop."""

    def __init__(self) -> None:
        self.scheduler = FakeScheduler()
        self.tool_events = _RecordingSink()
        self.address = f"127.0.0.1:{free_port()}"
        self.http_port = free_port()
        self.loop = asyncio.new_event_loop()
        threading.Thread(target=self.loop.run_forever, daemon=True).start()
        asyncio.run_coroutine_threadsafe(self._start(), self.loop).result(10)

    async def _start(self) -> None:
        self.grpc = grpc.aio.server()
        scheduler_pb2_grpc.add_SchedulerServicer_to_server(self.scheduler, self.grpc)
        self.grpc.add_insecure_port(self.address)
        await self.grpc.start()
        proxy = ToolProxy(ToolRegistry.build({}, UpstreamClient(1.0), 5.0), ToolDurationPredictor(), self.tool_events)
        self.runner = web.AppRunner(build_app(proxy))
        await self.runner.setup()
        await web.TCPSite(self.runner, "127.0.0.1", self.http_port).start()

    def stop(self) -> None:
        async def _stop():
            await self.runner.cleanup()
            await self.grpc.stop(0)

        asyncio.run_coroutine_threadsafe(_stop(), self.loop).result(10)
        self.loop.call_soon_threadsafe(self.loop.stop)

    @property
    def tools_url(self) -> str:
        return f"http://127.0.0.1:{self.http_port}"


class _RecordingSink:
    def __init__(self) -> None:
        self.started_calls: list = []

    def started(self, record) -> None:
        self.started_calls.append(record)

    def finished(self, record) -> None: ...


@pytest.fixture(scope="module")
def servers() -> Iterator[Servers]:
    servers = Servers()
    yield servers
    servers.stop()


def test_async_session_streams_chunks_and_result(servers):
    async def main():
        async with AsyncClient(servers.address, servers.tools_url) as client:
            assert await client.list_models() == ["tiny-llama"]
            async with client.open_session(tenant="t", agent="planner", system_prompt="be brief") as session:
                turn = session.turn("hi", max_tokens=16, temperature=0.5, seed=7)
                chunks = [chunk async for chunk in turn]
                result = await turn
                again = await session.turn(token_ids=[1, 2], role="tool")
                tool = await session.call_tool("echo", {"x": 1})
                child = await session.fork(agent="worker")
                await child.close()
            return session, chunks, result, again, tool

    session, chunks, result, again, tool = asyncio.run(main())
    assert chunks[0].metadata == TurnMetadata("t1", 0, 40, 32, "p0", "d1", "ab" * 16, span_id=f"{1:016x}")
    assert "".join(c.text for c in chunks) == "Hello!" and chunks[-1].finished
    assert (result.text, result.token_ids, result.finish_reason) == ("Hello!", [10, 11, 12], "stop")
    assert (result.prompt_tokens, result.cached_tokens, result.trace_id) == (40, 32, "ab" * 16)
    assert again.text == "Hello!" and tool == {"x": 1}
    assert session.closed == SessionClosed(turns=len(servers.scheduler.turns), tokens=99)
    opened = servers.scheduler.opened[-2:]
    assert (opened[0].tenant, opened[0].agent, opened[0].system_prompt) == ("t", "planner", "be brief")
    assert (opened[1].agent, opened[1].parent_session_id) == ("worker", session.id)
    first, second = servers.scheduler.turns[-2:]
    assert (first.message, first.sampling.max_tokens, first.sampling.seed) == ("hi", 16, 7)
    assert first.sampling.temperature == pytest.approx(0.5)
    assert (list(second.token_ids), second.role, second.sampling.HasField("seed")) == ([1, 2], "tool", False)


def test_a_tool_call_joins_the_trace_of_the_sessions_latest_turn(servers, spans):
    async def main():
        async with AsyncClient(servers.address, servers.tools_url) as client:
            async with client.open_session() as session:
                await session.call_tool("echo", {"before": "any turn"})
                await session.turn("one")
                latest = await session.turn("two")
                await session.call_tool("echo", {"after": "two"})
            return session, latest

    session, latest = asyncio.run(main())
    before, after = [s for s in spans.get_finished_spans() if s.name == "tool.call"]
    assert before.parent is None  # nothing to join yet: a trace of its own, tied by session.id
    assert after.parent is not None and after.parent.is_remote
    assert format(after.parent.trace_id, "032x") == latest.trace_id == "ab" * 16
    assert format(after.parent.span_id, "016x") == latest.metadata.span_id == session.last_turn.span_id
    assert latest.metadata.traceparent == f"00-{'ab' * 16}-{latest.metadata.span_id}-01"
    for span in (before, after):
        assert span.attributes["session.id"] == session.id
        assert span.attributes["openinference.span.kind"] == "TOOL"
    assert after.attributes["input.value"] == '{"after": "two"}'
    assert after.attributes["output.value"] == '{"after": "two"}'


def test_async_errors_are_typed(servers):
    async def main():
        async with AsyncClient(servers.address, servers.tools_url) as client:
            session = await client.open_session()
            with pytest.raises(InvalidRequestError, match="max_tokens too large"):
                await session.turn("bad")
            with pytest.raises(RetryableError, match="decode engine died"):
                await session.turn("dies")
            with pytest.raises(InvalidRequestError, match="exactly one"):
                session.turn("x", token_ids=[1])
            with pytest.raises(InvalidRequestError, match="bad turn arguments"):
                session.turn("x", max_tokens=-1)
            with pytest.raises(ToolCallError) as tool_error:
                await session.call_tool("nope")
            assert tool_error.value.status == 404
            ghost = AsyncSession(client, "ghost")  # a session the scheduler never opened
            with pytest.raises(SessionNotFound):
                await ghost.turn("hi")

    asyncio.run(main())


def test_unreachable_services_are_retryable():
    async def main():
        async with AsyncClient(f"127.0.0.1:{free_port()}", f"http://127.0.0.1:{free_port()}", timeout_s=2) as client:
            with pytest.raises(RetryableError):
                await client.open_session()
            with pytest.raises(RetryableError, match="unreachable"):
                await AsyncSession(client, "s").call_tool("echo")

    asyncio.run(main())


def test_leaving_a_turn_early_cancels_generation(servers):
    async def main():
        async with AsyncClient(servers.address, servers.tools_url) as client:
            session = await client.open_session()
            async with session.turn("endless") as turn:
                async for chunk in turn:
                    if chunk.text:
                        break

    asyncio.run(main())
    assert (
        asyncio.run_coroutine_threadsafe(asyncio.wait_for(servers.scheduler.cancelled.wait(), 5), servers.loop).result(
            10
        )
        is True
    )


def test_sync_client(servers):
    with Client(servers.address, servers.tools_url) as client:
        assert client.list_models() == ["tiny-llama"]
        with client.open_session(agent="coder") as session:
            texts = [chunk.text for chunk in session.turn("hi")]
            result = session.turn("again").result()
            assert session.call_tool("echo", {"k": "v"}) == {"k": "v"}
            with pytest.raises(InvalidRequestError, match="max_tokens too large"):
                session.turn("bad").result()
            child = session.fork(agent="sub")
            assert child.close().tokens == 99
    assert "".join(texts) == "Hello!" and result.cached_tokens == 32
    assert servers.scheduler.opened[-1].parent_session_id == session.id


def test_agent_info_and_tool_predictions_reach_the_servers(servers):
    async def main():
        async with AsyncClient(servers.address, servers.tools_url) as client:
            session = await client.open_session(agent="writer", parents=["planner"], critical=True, priority=7)
            await session.call_tool("echo", {"x": 1}, predicted_s=2.5)
            await session.call_tool("echo", {"x": 2})
            with pytest.raises(ValueError, match="^priority must be an integer"):
                client.open_session(priority=101)
            with pytest.raises(ValueError, match="^predicted_s must be a finite number"):
                await session.call_tool("echo", {}, predicted_s=-1.0)
            return session

    session = asyncio.run(main())
    opened = servers.scheduler.opened[-1]
    assert (opened.agent, list(opened.parents), opened.critical, opened.priority) == ("writer", ["planner"], True, 7)
    predicted, unpredicted = servers.tool_events.started_calls[-2:]
    assert (predicted.session_id, predicted.caller_predicted_s) == (session.id, 2.5)
    assert unpredicted.caller_predicted_s == 0.0
