"""Map domain exceptions to gRPC status codes, in one place for every servicer.

Servicers stay thin: they raise the plain Python errors the logic raises and the server's
`interceptors.ErrorInterceptor` turns them into statuses. A bad request never takes the service down.
"""

from __future__ import annotations

import logging
import math

import grpc

log = logging.getLogger(__name__)


class NotFoundError(ValueError):
    """A named thing (session, block, engine) does not exist: the request is invalid.

    `code` names what was missing where an API has a code for it (OpenAI's `model_not_found`);
    None leaves the front's default."""

    def __init__(self, message: str, code: str | None = None) -> None:
        super().__init__(message)
        self.code = code


class PayloadTooLarge(ValueError):
    """The request is over a size limit (bytes or tokens): HTTP 413, gRPC INVALID_ARGUMENT."""


class RetryableError(RuntimeError):
    """The request could not be served now (engine died, none available); retrying may work."""


class Unauthenticated(Exception):
    """No API key, or one no tenant holds: HTTP 401, gRPC UNAUTHENTICATED."""


class PermissionDenied(Exception):
    """The caller is authenticated but may not do this (an internal method its role does not call,
    a peer the scheduler has not registered): gRPC PERMISSION_DENIED."""


class FailedPrecondition(Exception):
    """The request is well formed but the system is not in a state to do it (draining the last
    engine of a role): gRPC FAILED_PRECONDITION."""


class Conflict(FailedPrecondition):
    """The request cannot be applied to the state it was made against, which changed meanwhile (a
    turn a failed scheduler may have committed before the client heard back): HTTP 409, gRPC
    FAILED_PRECONDITION. Retrying the same request is not safe; the caller re-reads first."""


class Overloaded(RetryableError):
    """A load bound (in-flight turns, rate, open sessions) refused the request: HTTP 429 with
    `Retry-After`, gRPC RESOURCE_EXHAUSTED with `retry-after` trailing metadata (whole seconds)."""

    def __init__(self, message: str, retry_after_s: float) -> None:
        super().__init__(message)
        self.retry_after_s = retry_after_s

    @property
    def retry_after(self) -> str:
        """The `Retry-After` value: whole seconds, at least 1 (HTTP's header has no fractions)."""
        return str(max(1, math.ceil(self.retry_after_s)))


def status_for(exc: BaseException) -> grpc.StatusCode:
    if isinstance(exc, NotFoundError):
        return grpc.StatusCode.NOT_FOUND
    if isinstance(exc, ValueError):
        return grpc.StatusCode.INVALID_ARGUMENT
    if isinstance(exc, Unauthenticated):
        return grpc.StatusCode.UNAUTHENTICATED
    if isinstance(exc, PermissionDenied):
        return grpc.StatusCode.PERMISSION_DENIED
    if isinstance(exc, FailedPrecondition):
        return grpc.StatusCode.FAILED_PRECONDITION
    if isinstance(exc, Overloaded):
        return grpc.StatusCode.RESOURCE_EXHAUSTED
    if isinstance(exc, (RetryableError, ConnectionError, grpc.aio.AioRpcError)):
        return grpc.StatusCode.UNAVAILABLE
    return grpc.StatusCode.INTERNAL


async def abort(context: grpc.aio.ServicerContext, exc: BaseException, method: str) -> None:
    """End the call with `status_for(exc)`; an INTERNAL one is a bug, logged with its traceback."""
    code = status_for(exc)
    if code is grpc.StatusCode.INTERNAL:
        log.error("%s failed", method, exc_info=exc)
    message = exc.details() if isinstance(exc, grpc.aio.AioRpcError) else str(exc)
    if isinstance(exc, Overloaded):
        context.set_trailing_metadata((("retry-after", exc.retry_after),))
    await context.abort(code, message or type(exc).__name__)
