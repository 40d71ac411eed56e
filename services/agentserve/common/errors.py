"""Map domain exceptions to gRPC status codes, in one place for every servicer.

Servicers stay thin: they raise the plain Python errors the logic raises and this decorator turns
them into statuses. A bad request never takes the service down.
"""

from __future__ import annotations

import functools
import inspect
import logging

import grpc

log = logging.getLogger(__name__)


class NotFoundError(ValueError):
    """A named thing (session, block, engine) does not exist: the request is invalid."""


class RetryableError(RuntimeError):
    """The request could not be served now (engine died, none available); retrying may work."""


def status_for(exc: BaseException) -> grpc.StatusCode:
    if isinstance(exc, ValueError):
        return grpc.StatusCode.INVALID_ARGUMENT
    if isinstance(exc, (RetryableError, ConnectionError, grpc.aio.AioRpcError)):
        return grpc.StatusCode.UNAVAILABLE
    return grpc.StatusCode.INTERNAL


async def _abort(context: grpc.aio.ServicerContext, exc: BaseException, method: str) -> None:
    code = status_for(exc)
    if code is grpc.StatusCode.INTERNAL:
        log.exception("%s failed", method)
    message = exc.details() if isinstance(exc, grpc.aio.AioRpcError) else str(exc)
    await context.abort(code, message or type(exc).__name__)


def grpc_errors(method):
    """Decorate an async servicer method (unary or server-streaming) to translate exceptions."""
    if inspect.isasyncgenfunction(method):

        @functools.wraps(method)
        async def stream_wrapper(self, request, context):
            try:
                async for item in method(self, request, context):
                    yield item
            except (grpc.aio.AbortError, GeneratorExit):
                raise
            except Exception as exc:  # noqa: BLE001 - translated to a status, never swallowed
                await _abort(context, exc, method.__qualname__)

        return stream_wrapper

    @functools.wraps(method)
    async def unary_wrapper(self, request, context):
        try:
            return await method(self, request, context)
        except grpc.aio.AbortError:
            raise
        except Exception as exc:  # noqa: BLE001
            await _abort(context, exc, method.__qualname__)

    return unary_wrapper
