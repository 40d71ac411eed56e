"""gRPC interceptors: trace context and error mapping, written once for every RPC of every service.

Server side (`server_interceptors`, installed by `server.serve`), outermost first:
- response streams run in the call's own task (`StreamsInTheirTask`), so the next one's context
  is detached where it was attached;
- tracing (OpenTelemetry's gRPC instrumentation): the caller's W3C trace context is made current
  and a SERVER span wraps the call, so the spans a servicer opens join the caller's trace;
- errors: whatever a servicer raises becomes a status (`errors.status_for`), so servicers raise
  plain Python errors and a bad request never takes the service down. Inside the span, which
  records the status. A request message that does not parse (garbage bytes, invalid UTF-8 in a
  string field) reaches the servicer as `Malformed` and fails INVALID_ARGUMENT, not grpc's
  INTERNAL "Exception deserializing request!".

Client side (`client_interceptors`, on every channel from `channels.open_channel`): a CLIENT span
per call whose context travels in the metadata. A caller holding a span it cannot make current
(a generator that yields between calls) passes that span's context in the call's metadata instead
(`telemetry.outgoing_metadata`); the client span then becomes its child.

Not traced: health and reflection (probes, and the instrumentation's streaming wrapper cannot run
Health.Watch, which writes with `context.write`), nor the engines' once-a-second heartbeat.
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from contextlib import aclosing, contextmanager
from typing import Any

import grpc
from opentelemetry import context as otel_context
from opentelemetry import propagate, trace
from opentelemetry.instrumentation.grpc import aio_client_interceptors, aio_server_interceptor, filters

from agentserve.common.errors import abort

TRACED = filters.negate(
    filters.any_of(
        filters.service_prefix("grpc.health."),
        filters.service_prefix("grpc.reflection."),
        filters.full_method_name("/agentserve.v1.SchedulerInternal/Heartbeat"),
    )
)

Behavior = Callable[[Any, grpc.aio.ServicerContext], Any]
# The rest of a server's interceptor chain, down to the method handler (None: no such method).
Continuation = Callable[[grpc.HandlerCallDetails], Awaitable[grpc.RpcMethodHandler | None]]
# The rest of a client's interceptor chain, down to the call.
ClientContinuation = Callable[[grpc.aio.ClientCallDetails, Any], Any]


def server_interceptors() -> list[grpc.aio.ServerInterceptor]:
    return [StreamsInTheirTask(), aio_server_interceptor(filter_=TRACED), ErrorInterceptor()]


def client_interceptors() -> list[grpc.aio.ClientInterceptor]:
    parents = [_UnaryUnaryParent(), _UnaryStreamParent(), _StreamUnaryParent(), _StreamStreamParent()]
    return [*parents, *aio_client_interceptors(filter_=TRACED)]


class StreamsInTheirTask(grpc.aio.ServerInterceptor):
    """Response streams sent with `context.write` from a coroutine, not yielded to grpc.aio.

    grpc.aio leaves the generator of a stream cancelled mid-send (the client went away, the
    server is stopping) to the garbage collector, which closes it in another context: the trace
    context the instrumentation attached in it then fails to detach (an ERROR with a traceback).
    Written from a coroutine, the stream is closed in the call's own task, even when cancelled.
    """

    async def intercept_service(
        self, continuation: Continuation, handler_call_details: grpc.HandlerCallDetails
    ) -> grpc.RpcMethodHandler | None:
        handler = await continuation(handler_call_details)
        if handler is None or not handler.response_streaming:
            return handler
        kind = _kind(handler)
        behavior = getattr(handler, kind)
        if not inspect.isasyncgenfunction(behavior):  # already writes (Health.Watch)
            return handler

        async def written(request: Any, context: grpc.aio.ServicerContext) -> None:
            async with aclosing(behavior(request, context)) as stream:
                async for message in stream:
                    await context.write(message)

        return handler._replace(**{kind: written})


class ErrorInterceptor(grpc.aio.ServerInterceptor):
    """Every method handler, whatever its streaming kind, with exceptions turned into statuses and
    requests that do not parse turned into INVALID_ARGUMENT."""

    async def intercept_service(
        self, continuation: Continuation, handler_call_details: grpc.HandlerCallDetails
    ) -> grpc.RpcMethodHandler | None:
        handler = await continuation(handler_call_details)
        if handler is None:
            return None
        kind = _kind(handler)
        method = handler_call_details.method
        behavior = mapped(_parsed(getattr(handler, kind), handler.request_streaming, method), method)
        replaced: dict[str, Any] = {kind: behavior}
        if handler.request_deserializer is not None:
            replaced["request_deserializer"] = _tolerant(handler.request_deserializer)
        return handler._replace(**replaced)


class Malformed:
    """A request message that failed to parse, standing in for it until the servicer would get it."""

    def __init__(self, error: Exception) -> None:
        self.error = error


def _tolerant(deserializer: Callable[[bytes], Any]) -> Callable[[bytes], Any]:
    def deserialize(raw: bytes) -> Any:
        try:
            return deserializer(raw)
        except Exception as exc:  # noqa: BLE001 - protobuf's DecodeError and kin: reported as INVALID_ARGUMENT
            return Malformed(exc)

    return deserialize


def _malformed(method: str, message: Malformed) -> ValueError:
    return ValueError(f"malformed {method.rsplit('/', 1)[-1]} request: {message.error or 'cannot parse'}")


def _parsed(behavior: Behavior, request_streaming: bool, method: str) -> Behavior:
    """`behavior` raising ValueError for a `Malformed` request (or streamed request message)."""
    return _parsed_stream(behavior, method) if request_streaming else _parsed_unary(behavior, method)


def _parsed_stream(behavior: Behavior, method: str) -> Behavior:
    async def checked(messages: AsyncIterator[Any]) -> AsyncIterator[Any]:
        async for message in messages:
            if isinstance(message, Malformed):
                raise _malformed(method, message)
            yield message

    if inspect.isasyncgenfunction(behavior):

        @functools.wraps(behavior)
        async def stream_in_stream_out(
            request_iterator: AsyncIterator[Any], context: grpc.aio.ServicerContext
        ) -> AsyncIterator[Any]:
            async for item in behavior(checked(request_iterator), context):
                yield item

        return stream_in_stream_out

    @functools.wraps(behavior)
    async def stream_in(request_iterator: AsyncIterator[Any], context: grpc.aio.ServicerContext) -> Any:
        return await behavior(checked(request_iterator), context)

    return stream_in


def _parsed_unary(behavior: Behavior, method: str) -> Behavior:
    if inspect.isasyncgenfunction(behavior):

        @functools.wraps(behavior)
        async def unary_in_stream_out(request: Any, context: grpc.aio.ServicerContext) -> AsyncIterator[Any]:
            if isinstance(request, Malformed):
                raise _malformed(method, request)
            async for item in behavior(request, context):
                yield item

        return unary_in_stream_out

    @functools.wraps(behavior)
    async def unary_in(request: Any, context: grpc.aio.ServicerContext) -> Any:
        if isinstance(request, Malformed):
            raise _malformed(method, request)
        return await behavior(request, context)

    return unary_in


def _kind(handler: grpc.RpcMethodHandler) -> str:
    """The handler's field holding its behavior: unary_unary, unary_stream, stream_unary or stream_stream."""
    request = "stream" if handler.request_streaming else "unary"
    return f"{request}_{'stream' if handler.response_streaming else 'unary'}"


def mapped(behavior: Behavior, method: str) -> Behavior:
    """`behavior` (a servicer method) aborting with `status_for(exc)` when it raises `exc`.

    An async generator stays one (server streaming); anything else is awaited, which also covers
    streaming methods that write with `context.write`.
    """
    if inspect.isasyncgenfunction(behavior):

        @functools.wraps(behavior)
        async def stream(request: Any, context: grpc.aio.ServicerContext) -> AsyncIterator[Any]:
            try:
                async for item in behavior(request, context):
                    yield item
            except (grpc.aio.AbortError, GeneratorExit):
                raise
            except Exception as exc:  # noqa: BLE001 - translated to a status, never swallowed
                await abort(context, exc, method)

        return stream

    @functools.wraps(behavior)
    async def unary(request: Any, context: grpc.aio.ServicerContext) -> Any:
        try:
            return await behavior(request, context)
        except grpc.aio.AbortError:
            raise
        except Exception as exc:  # noqa: BLE001
            await abort(context, exc, method)

    return unary


async def _parented(
    continuation: ClientContinuation, client_call_details: grpc.aio.ClientCallDetails, request: Any
) -> Any:
    """The interceptors after this one (the client span's start) run under the trace context the
    caller put in the call's metadata, if any."""
    with _context_from(client_call_details.metadata):
        return await continuation(client_call_details, request)


# grpc.aio files an interceptor under one kind of call only: one class per kind.
class _UnaryUnaryParent(grpc.aio.UnaryUnaryClientInterceptor):
    async def intercept_unary_unary(
        self, continuation: ClientContinuation, client_call_details: grpc.aio.ClientCallDetails, request: Any
    ) -> Any:
        return await _parented(continuation, client_call_details, request)


class _UnaryStreamParent(grpc.aio.UnaryStreamClientInterceptor):
    async def intercept_unary_stream(
        self, continuation: ClientContinuation, client_call_details: grpc.aio.ClientCallDetails, request: Any
    ) -> Any:
        return await _parented(continuation, client_call_details, request)


class _StreamUnaryParent(grpc.aio.StreamUnaryClientInterceptor):
    async def intercept_stream_unary(
        self, continuation: ClientContinuation, client_call_details: grpc.aio.ClientCallDetails, request_iterator: Any
    ) -> Any:
        return await _parented(continuation, client_call_details, request_iterator)


class _StreamStreamParent(grpc.aio.StreamStreamClientInterceptor):
    async def intercept_stream_stream(
        self, continuation: ClientContinuation, client_call_details: grpc.aio.ClientCallDetails, request_iterator: Any
    ) -> Any:
        return await _parented(continuation, client_call_details, request_iterator)


@contextmanager
def _context_from(metadata: grpc.aio.Metadata | None) -> Iterator[None]:
    parent = propagate.extract(dict(metadata or ()))
    if not trace.get_current_span(parent).get_span_context().is_valid:
        yield
        return
    token = otel_context.attach(parent)
    try:
        yield
    finally:
        otel_context.detach(token)
