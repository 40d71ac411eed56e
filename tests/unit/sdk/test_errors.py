"""gRPC statuses and HTTP codes map to the SDK's typed errors."""

from __future__ import annotations

import grpc
import pytest

from agentserve.sdk.errors import (
    AgentServeError,
    InvalidRequestError,
    RetryableError,
    SessionNotFound,
    ToolCallError,
    error_from_http,
    error_from_rpc,
)

pytestmark = pytest.mark.unit


def _rpc_error(code: grpc.StatusCode, details: str) -> grpc.aio.AioRpcError:
    return grpc.aio.AioRpcError(code, grpc.aio.Metadata(), grpc.aio.Metadata(), details)


@pytest.mark.parametrize(
    "code, cls",
    [
        (grpc.StatusCode.INVALID_ARGUMENT, InvalidRequestError),
        (grpc.StatusCode.OUT_OF_RANGE, InvalidRequestError),
        (grpc.StatusCode.NOT_FOUND, SessionNotFound),
        (grpc.StatusCode.UNAVAILABLE, RetryableError),
        (grpc.StatusCode.DEADLINE_EXCEEDED, RetryableError),
        (grpc.StatusCode.RESOURCE_EXHAUSTED, RetryableError),
        (grpc.StatusCode.INTERNAL, AgentServeError),
        (grpc.StatusCode.CANCELLED, AgentServeError),
    ],
)
def test_grpc_status_mapping(code, cls):
    error = error_from_rpc(_rpc_error(code, "why"))
    assert type(error) is cls and error.code == code and str(error) == "why"
    assert isinstance(error, AgentServeError)


def test_session_not_found_is_an_invalid_request():
    assert issubclass(SessionNotFound, InvalidRequestError)


def test_http_tool_errors_carry_status_body_and_retryability():
    error = error_from_http(404, {"error": {"message": "unknown tool 'x'", "type": "not_found_error"}})
    assert isinstance(error, ToolCallError) and error.status == 404 and not error.retryable
    assert "unknown tool 'x'" in str(error) and error.body["error"]["type"] == "not_found_error"
    assert error_from_http(503, {"text": "down"}).retryable
    assert str(error_from_http(500, ["odd"])) == "tool call failed with HTTP 500"
