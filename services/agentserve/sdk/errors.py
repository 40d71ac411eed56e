"""The SDK's exceptions, and the one mapping from gRPC statuses and HTTP codes to them.

Callers catch by meaning: `InvalidRequestError` (fix the request), `RetryableError` (try again;
a failed turn left the session unchanged), `SessionNotFound`, `ToolCallError` (the tool answered
with an error; its body is attached).
"""

from __future__ import annotations

from typing import Any

import grpc


class AgentServeError(Exception):
    """Base of every SDK error. `code` is the gRPC status, `status` the HTTP status, when known."""

    def __init__(self, message: str, *, code: grpc.StatusCode | None = None, status: int | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.code = code
        self.status = status


class InvalidRequestError(AgentServeError):
    """The server rejected the request (bad message, max_tokens, token ids...); retrying will not help."""


class SessionNotFound(InvalidRequestError):
    """The session does not exist (never opened, closed, or forgotten by a restarted scheduler)."""


class AuthenticationError(AgentServeError):
    """The server has API keys and the client sent none, or one it does not know (`api_key=`)."""


class RetryableError(AgentServeError):
    """The request could not be served now (no healthy engine, an engine died, overload).
    `retry_after_s` is when the server said to retry (overload), else None."""

    def __init__(self, message: str, *, retry_after_s: float | None = None, **kwargs: Any) -> None:
        super().__init__(message, **kwargs)
        self.retry_after_s = retry_after_s


class ToolCallError(AgentServeError):
    """A tool call through the proxy answered with a non-2xx status; `body` is its parsed body."""

    def __init__(self, message: str, *, status: int, body: Any) -> None:
        super().__init__(message, status=status)
        self.body = body

    @property
    def retryable(self) -> bool:
        return self.status in RETRYABLE_HTTP


INVALID_CODES = frozenset(
    {
        grpc.StatusCode.INVALID_ARGUMENT,
        grpc.StatusCode.OUT_OF_RANGE,
        grpc.StatusCode.FAILED_PRECONDITION,
        grpc.StatusCode.ALREADY_EXISTS,
    }
)
RETRYABLE_CODES = frozenset(
    {
        grpc.StatusCode.UNAVAILABLE,
        grpc.StatusCode.DEADLINE_EXCEEDED,
        grpc.StatusCode.RESOURCE_EXHAUSTED,
        grpc.StatusCode.ABORTED,
    }
)
RETRYABLE_HTTP = frozenset({429, 502, 503, 504})


def error_from_rpc(exc: grpc.RpcError) -> AgentServeError:
    """The SDK error for a failed gRPC call (aio or sync)."""
    code = exc.code() if hasattr(exc, "code") else None
    details = (exc.details() if hasattr(exc, "details") else None) or str(code or exc)
    if code == grpc.StatusCode.NOT_FOUND:
        return SessionNotFound(details, code=code)
    if code in INVALID_CODES:
        return InvalidRequestError(details, code=code)
    if code == grpc.StatusCode.UNAUTHENTICATED:
        return AuthenticationError(details, code=code)
    if code in RETRYABLE_CODES:
        return RetryableError(details, code=code, retry_after_s=_retry_after(exc))
    return AgentServeError(details, code=code)


def _retry_after(exc: grpc.RpcError) -> float | None:
    trailing = exc.trailing_metadata() if hasattr(exc, "trailing_metadata") else None
    for key, value in trailing or ():
        if key == "retry-after":
            try:
                return float(value)
            except ValueError:
                return None
    return None


def error_from_http(status: int, body: Any) -> AgentServeError:
    """The SDK error for a failed tool call: `ToolCallError` carrying the body."""
    message = f"tool call failed with HTTP {status}"
    if isinstance(body, dict) and isinstance(body.get("error"), dict) and body["error"].get("message"):
        message = f"{message}: {body['error']['message']}"
    return ToolCallError(message, status=status, body=body)
