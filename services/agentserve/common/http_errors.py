"""What every HTTP front (the scheduler's OpenAI gateway, the tool proxy) does around its handlers:
make the caller's W3C trace context current, and answer exceptions as OpenAI-shaped JSON errors.

The split is gRPC's (`errors.status_for`): a ValueError is the client's fault (400, 404 for a
named thing that does not exist, 413 for a request over a size limit), a missing or unknown API key
is 401, a load bound's refusal is 429 with `Retry-After`, a RetryableError or ConnectionError
means try again (503), a Conflict (the state changed under the request) is 409, and
anything else is our bug (500, logged with its traceback, its text kept out of the reply). The
fronts' bodies differ in a few ways their clients already see; `ErrorStyle` names them.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any

from aiohttp import web
from opentelemetry import context as otel_context
from opentelemetry import propagate

from agentserve.common.errors import (
    Conflict,
    NotFoundError,
    Overloaded,
    PayloadTooLarge,
    RetryableError,
    Unauthenticated,
)

log = logging.getLogger(__name__)

Handler = Any  # aiohttp's request handler: `async (web.Request) -> web.StreamResponse`


def error_body(message: str, type_: str = "invalid_request_error", code: str | None = None) -> dict[str, Any]:
    """OpenAI's error object."""
    return {"error": {"message": message, "type": type_, "param": None, "code": code}}


@dataclass(frozen=True)
class ErrorStyle:
    service: str  # named in a 500's message: "see the <service> log"
    not_found_type: str = "invalid_request_error"
    not_found_code: str | None = "not_found"
    retryable_is_503: bool = True  # else a RetryableError is a 500 like any other
    openai_fields: bool = True  # bodies carry OpenAI's "param" and "code"; else only message and type

    def body(self, message: str, type_: str, code: str | None = None) -> dict[str, Any]:
        if self.openai_fields:
            return error_body(message, type_, code)
        return {"error": {"message": message, "type": type_}}

    def response(self, exc: BaseException) -> tuple[int, dict[str, Any]]:
        """(HTTP status, JSON body) for an exception raised while serving a request."""
        message = str(exc) or type(exc).__name__
        if isinstance(exc, NotFoundError):
            return 404, self.body(message, self.not_found_type, exc.code or self.not_found_code)
        if isinstance(exc, PayloadTooLarge):
            return 413, self.body(message, "invalid_request_error", "request_too_large")
        if isinstance(exc, ValueError):
            return 400, self.body(message, "invalid_request_error")
        if isinstance(exc, Unauthenticated):
            return 401, self.body(message, "invalid_request_error", "invalid_api_key")
        if isinstance(exc, Overloaded):
            return 429, self.body(message, "rate_limit_error", "rate_limit_exceeded")
        if isinstance(exc, Conflict):
            return 409, self.body(message, "invalid_request_error", "conflict")
        if self.retryable_is_503 and isinstance(exc, (RetryableError, ConnectionError)):
            return 503, self.body(message, "service_unavailable_error")
        return 500, self.body(f"internal error; see the {self.service} log", "server_error")


def error_headers(exc: BaseException) -> dict[str, str]:
    """The headers an error answer carries besides its body: when to retry, how to authenticate."""
    if isinstance(exc, Overloaded):
        return {"Retry-After": exc.retry_after}
    if isinstance(exc, Unauthenticated):
        return {"WWW-Authenticate": "Bearer"}
    return {}


def middlewares(style: ErrorStyle, *inner: Handler) -> list[Handler]:
    """An app's middlewares, outermost first: the trace context covers the error answer too, and
    the `inner` ones (authentication) raise into the error mapping."""
    return [trace_context, json_errors(style), *inner]


@web.middleware
async def trace_context(request: web.Request, handler: Handler) -> web.StreamResponse:
    """The caller's `traceparent` made current for the handler, so the spans it opens join that trace."""
    token = otel_context.attach(propagate.extract(request.headers))
    try:
        return await handler(request)
    finally:
        otel_context.detach(token)


def json_errors(style: ErrorStyle) -> Handler:
    @web.middleware
    async def errors_as_json(request: web.Request, handler: Handler) -> web.StreamResponse:
        try:
            return await handler(request)
        except web.HTTPException as exc:
            if exc.status < 400:
                raise
            # aiohttp's own errors (404 route, 405, 413 body too large) in the same shape.
            return web.json_response(
                style.body(exc.text or exc.reason, "invalid_request_error"),
                status=exc.status,
                headers={k: v for k, v in exc.headers.items() if k.lower() == "allow"},
            )
        except Exception as exc:
            status, body = style.response(exc)
            if status >= 500 and status != 503:
                log.exception("%s %s failed", request.method, request.path)
            return web.json_response(body, status=status, headers=error_headers(exc))

    return errors_as_json
