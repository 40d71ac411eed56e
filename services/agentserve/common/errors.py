"""Map domain exceptions to gRPC status codes, in one place for every servicer.

Servicers stay thin: they raise the plain Python errors the logic raises and the server's
`interceptors.ErrorInterceptor` turns them into statuses. A bad request never takes the service down.
"""

from __future__ import annotations

import logging

import grpc

log = logging.getLogger(__name__)


class NotFoundError(ValueError):
    """A named thing (session, block, engine) does not exist: the request is invalid.

    `code` names what was missing where an API has a code for it (OpenAI's `model_not_found`);
    None leaves the front's default."""

    def __init__(self, message: str, code: str | None = None) -> None:
        super().__init__(message)
        self.code = code


class RetryableError(RuntimeError):
    """The request could not be served now (engine died, none available); retrying may work."""


def status_for(exc: BaseException) -> grpc.StatusCode:
    if isinstance(exc, ValueError):
        return grpc.StatusCode.INVALID_ARGUMENT
    if isinstance(exc, (RetryableError, ConnectionError, grpc.aio.AioRpcError)):
        return grpc.StatusCode.UNAVAILABLE
    return grpc.StatusCode.INTERNAL


async def abort(context: grpc.aio.ServicerContext, exc: BaseException, method: str) -> None:
    """End the call with `status_for(exc)`; an INTERNAL one is a bug, logged with its traceback."""
    code = status_for(exc)
    if code is grpc.StatusCode.INTERNAL:
        log.error("%s failed", method, exc_info=exc)
    message = exc.details() if isinstance(exc, grpc.aio.AioRpcError) else str(exc)
    await context.abort(code, message or type(exc).__name__)
