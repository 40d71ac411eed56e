"""The gateway's exceptions as OpenAI-style HTTP errors, in one place for routes and streams.

The mapping is the one every HTTP front shares (`agentserve.common.http_errors`), in the gateway's
style: a 404 is an `invalid_request_error` with code `not_found`, and a RetryableError is a 503.
"""

from __future__ import annotations

from typing import Any

from agentserve.common.http_errors import ErrorStyle

GATEWAY_ERRORS = ErrorStyle("scheduler")


def error_response(exc: BaseException) -> tuple[int, dict[str, Any]]:
    """(HTTP status, OpenAI error body) for an exception raised while serving a request."""
    return GATEWAY_ERRORS.response(exc)
