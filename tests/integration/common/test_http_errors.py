"""The one HTTP middleware layer, in both real apps (scheduler gateway, tool proxy) over loopback:
each app's exact error statuses and bodies, and the caller's trace context made current."""

from __future__ import annotations

import asyncio

import pytest
from aiohttp import web
from aiohttp.test_utils import TestClient, TestServer
from opentelemetry import trace

from agentserve.common.errors import NotFoundError, RetryableError
from agentserve.common.telemetry import current_trace_id
from agentserve.scheduler.http.app import build_app as gateway_app
from agentserve.toolproxy.http_app import build_app as proxy_app
from agentserve.toolproxy.predictor import ToolDurationPredictor
from agentserve.toolproxy.proxy import ToolProxy
from agentserve.toolproxy.tools import ToolRegistry, UpstreamClient
from tests.unit.scheduler_http.fakes import FakeCore

pytestmark = pytest.mark.integration

RAISED = {
    "not_found": NotFoundError("unknown session s-9"),
    "value": ValueError("max_tokens must be positive"),
    "retryable": RetryableError("no healthy decode engine"),
    "connection": ConnectionResetError("engine went away"),
    "bug": KeyError("secret internals"),
}
TRACEPARENT = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"


def _openai(message: str, type_: str, code: str | None = None) -> dict:
    return {"error": {"message": message, "type": type_, "param": None, "code": code}}


def _short(message: str, type_: str) -> dict:
    return {"error": {"message": message, "type": type_}}


GATEWAY = {
    "not_found": (404, _openai("unknown session s-9", "invalid_request_error", "not_found")),
    "value": (400, _openai("max_tokens must be positive", "invalid_request_error")),
    "retryable": (503, _openai("no healthy decode engine", "service_unavailable_error")),
    "connection": (503, _openai("engine went away", "service_unavailable_error")),
    "bug": (500, _openai("internal error; see the scheduler log", "server_error")),
    "no_route": (404, _openai("404: Not Found", "invalid_request_error")),
    "bad_method": (405, _openai("405: Method Not Allowed", "invalid_request_error")),
}
PROXY = {
    "not_found": (404, _short("unknown session s-9", "not_found_error")),
    "value": (400, _short("max_tokens must be positive", "invalid_request_error")),
    "retryable": (500, _short("internal error; see the toolproxy log", "server_error")),
    "connection": (500, _short("internal error; see the toolproxy log", "server_error")),
    "bug": (500, _short("internal error; see the toolproxy log", "server_error")),
    "no_route": (404, _short("404: Not Found", "invalid_request_error")),
    "bad_method": (405, _short("405: Method Not Allowed", "invalid_request_error")),
}


def _proxy_app() -> web.Application:
    return proxy_app(ToolProxy(ToolRegistry.build({}, UpstreamClient(1.0), 5.0), ToolDurationPredictor(), None))


async def _raise(request: web.Request) -> web.Response:
    raise RAISED[request.match_info["kind"]]


async def _trace(request: web.Request) -> web.Response:
    return web.json_response({"trace_id": current_trace_id()})


def _errors(app: web.Application) -> dict:
    app.router.add_get("/raise/{kind}", _raise)

    async def main():
        async with TestClient(TestServer(app)) as client:
            out = {}
            for kind in RAISED:
                resp = await client.get(f"/raise/{kind}")
                out[kind] = (resp.status, await resp.json())
            resp = await client.get("/no/such/route")
            out["no_route"] = (resp.status, await resp.json())
            resp = await client.delete("/health")
            out["bad_method"] = (resp.status, await resp.json())
            allow = resp.headers.get("Allow")
            return out, allow

    return asyncio.run(main())


@pytest.mark.parametrize("build, expected", [(lambda: gateway_app(FakeCore()), GATEWAY), (_proxy_app, PROXY)])
def test_each_app_keeps_its_error_statuses_and_bodies(build, expected, caplog) -> None:
    errors, allow = _errors(build())
    assert errors == expected
    assert allow == "GET,HEAD"  # a 405 says what is allowed
    logged = [r for r in caplog.records if r.name == "agentserve.common.http_errors"]
    bugs = [k for k, (status, _) in expected.items() if status == 500]
    assert [r.getMessage() for r in logged] == [f"GET /raise/{k} failed" for k in bugs]
    assert all(r.exc_info is not None for r in logged)


@pytest.mark.parametrize("build", [lambda: gateway_app(FakeCore()), _proxy_app])
def test_the_callers_trace_context_is_current_in_the_handler(build) -> None:
    app = build()
    app.router.add_get("/trace", _trace)

    async def main():
        async with TestClient(TestServer(app)) as client:
            traced = await (await client.get("/trace", headers={"traceparent": TRACEPARENT})).json()
            bare = await (await client.get("/trace")).json()
            return traced, bare, trace.get_current_span().get_span_context().is_valid

    traced, bare, leaked = asyncio.run(main())
    assert traced == {"trace_id": "0af7651916cd43dd8448eb211c80319c"}
    assert bare == {"trace_id": ""} and not leaked
