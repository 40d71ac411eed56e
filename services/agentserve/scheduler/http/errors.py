"""Exceptions to OpenAI-style HTTP errors, in one place for routes and streams.

The same split as gRPC (`agentserve.common.errors`): a ValueError is the client's fault (400, or
404 for a named thing that does not exist), a RetryableError means try again (503), anything
else is our bug (500, logged with its traceback by the caller).
"""

from __future__ import annotations

from typing import Any

from agentserve.common.errors import NotFoundError, RetryableError
from agentserve.scheduler.http.responses import error_body


def error_response(exc: BaseException) -> tuple[int, dict[str, Any]]:
    """(HTTP status, OpenAI error body) for an exception raised while serving a request."""
    message = str(exc) or type(exc).__name__
    if isinstance(exc, NotFoundError):
        return 404, error_body(message, "invalid_request_error", "not_found")
    if isinstance(exc, ValueError):
        return 400, error_body(message, "invalid_request_error")
    if isinstance(exc, (RetryableError, ConnectionError)):
        return 503, error_body(message, "service_unavailable_error")
    return 500, error_body("internal error; see the scheduler log", "server_error")
