"""The tool proxy's HTTP data path: `POST /tools/{name}` with a JSON object of arguments.

The session comes from `X-Session-Id`; an optional `X-Call-Id` names the call (else one is
made up), an optional `X-Tool-Predicted-S` is the caller's estimate of its duration in seconds
(reported to the scheduler with the call's events). The response is the tool's own status and body, plus `X-Call-Id` and
`X-Tool-Duration-S`. Proxy errors are JSON `{"error": {"message", "type"}}`: 404 for an unknown
tool, 400 for a body that is not a JSON object or arguments the tool rejects.
`GET /tools` lists the tools with their predicted durations; `GET /health` is a liveness probe.
With API keys configured, every route but `/health` needs `Authorization: Bearer <key>` (else 401).
"""

from __future__ import annotations

import re

from aiohttp import web

from agentserve.common.api_keys import ApiKeys
from agentserve.common.http_auth import api_key_auth
from agentserve.common.http_errors import ErrorStyle, middlewares
from agentserve.common.json_body import parse_json_object
from agentserve.toolproxy.proxy import ToolProxy

MAX_BODY_BYTES = 8 << 20
ID_PATTERN = re.compile(r"[A-Za-z0-9._:\-]{1,128}")
PROXY = web.AppKey("proxy", ToolProxy)
# Error bodies as the proxy's clients know them: message and type only, 404 a `not_found_error`.
PROXY_ERRORS = ErrorStyle(
    "toolproxy", not_found_type="not_found_error", not_found_code=None, retryable_is_503=False, openai_fields=False
)


def build_app(proxy: ToolProxy, keys: ApiKeys = ApiKeys(), max_body_bytes: int = MAX_BODY_BYTES) -> web.Application:
    app = web.Application(client_max_size=max_body_bytes, middlewares=middlewares(PROXY_ERRORS, api_key_auth(keys)))
    app[PROXY] = proxy
    app.router.add_post("/tools/{name}", call_tool)
    app.router.add_get("/tools", list_tools)
    app.router.add_get("/health", health)
    return app


async def call_tool(request: web.Request) -> web.Response:
    args = _parse_args(await request.read())
    session_id = _header_id(request, "X-Session-Id")
    call_id = _header_id(request, "X-Call-Id")
    predicted_s = _header_seconds(request, "X-Tool-Predicted-S")
    result, record = await request.app[PROXY].call(request.match_info["name"], args, session_id, call_id, predicted_s)
    headers = {"X-Call-Id": record.call_id, "X-Tool-Duration-S": f"{record.actual_duration_s:.6f}"}
    return web.Response(status=result.status, body=result.body, content_type=result.content_type, headers=headers)


async def list_tools(request: web.Request) -> web.Response:
    tools = [
        {"name": t.name, "kind": t.kind, "predicted_duration_s": t.predicted_duration_s, "calls": t.calls}
        for t in request.app[PROXY].tools()
    ]
    return web.json_response({"tools": tools})


async def health(request: web.Request) -> web.Response:
    return web.json_response({"status": "ok"})


def _parse_args(raw: bytes) -> dict:
    if not raw.strip():
        return {}  # a tool without arguments may be called with an empty body
    return parse_json_object(raw, what="tool arguments")


def _header_seconds(request: web.Request, name: str) -> float:
    """A duration header: 0 when absent; 400 naming the header unless a finite number >= 0."""
    value = request.headers.get(name, "").strip()
    if not value:
        return 0.0
    try:
        seconds = float(value)
    except ValueError:
        seconds = -1.0
    if not 0 <= seconds < float("inf"):
        raise ValueError(f"{name} must be a finite number of seconds >= 0, got {value[:32]!r}")
    return seconds


def _header_id(request: web.Request, name: str) -> str:
    value = request.headers.get(name, "").strip()
    if value and not ID_PATTERN.fullmatch(value):
        raise ValueError(f"{name} must be 1-128 characters of letters, digits and . _ : -")
    return value
