"""The OpenAI-compatible HTTP gateway: routes that translate HTTP to scheduler-core calls.

Routes:
  GET  /v1/models                 the served models
  POST /v1/chat/completions       with `X-Session-Id`: a turn of that server-side session (see
                                  `sessions.py` for which messages are forwarded); without it: a
                                  stateless completion of the whole rendered chat template
  POST /v1/completions            always stateless; `prompt` is text or token ids
  DELETE /v1/sessions/{id}        close a session (an agentserve extension)
  GET  /health                    liveness for HTTP-only probes

`X-Tenant` (optional) names the tenant whose cache the request may share. Responses carry
`X-Trace-Id` (the turn's OpenTelemetry trace: the caller's, if the request carries a W3C
`traceparent`) and, in session mode, `X-Session-Id`. Every error is an OpenAI-style
`{"error": {...}}` body; a bad request never takes the server down.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncGenerator
from contextlib import aclosing
from typing import Any

from aiohttp import web

from agentserve.common.http_errors import middlewares
from agentserve.scheduler.http.core_api import CoreAPI, TurnEventAPI
from agentserve.scheduler.http.errors import GATEWAY_ERRORS
from agentserve.scheduler.http.responses import Reply, ReplyFormat
from agentserve.scheduler.http.schemas import (
    Message,
    parse_chat_request,
    parse_completion_request,
    parse_json_object,
    parse_session_id,
)
from agentserve.scheduler.http.sessions import ChatSessions
from agentserve.scheduler.http.sse import stream_reply

log = logging.getLogger(__name__)

# Agent conversations resent in full reach megabytes (~4 bytes per token of a 100K+ context).
MAX_BODY_BYTES = 16 << 20
CORE = web.AppKey("core", CoreAPI)
SESSIONS = web.AppKey("sessions", ChatSessions)


def build_app(core: CoreAPI, max_body_bytes: int = MAX_BODY_BYTES) -> web.Application:
    app = web.Application(client_max_size=max_body_bytes, middlewares=middlewares(GATEWAY_ERRORS))
    app[CORE] = core
    app[SESSIONS] = ChatSessions(core)
    app.router.add_get("/v1/models", list_models)
    app.router.add_post("/v1/chat/completions", chat_completions)
    app.router.add_post("/v1/completions", completions)
    app.router.add_delete("/v1/sessions/{session_id}", close_session)
    app.router.add_get("/health", health)
    return app


async def start_http(core: CoreAPI, host: str, port: int) -> web.AppRunner:
    """Serve the gateway on host:port (port 0 picks a free one; see `runner.addresses`).

    The caller owns the runner and stops it with `await runner.cleanup()`.
    """
    runner = web.AppRunner(build_app(core), access_log=None)
    await runner.setup()
    try:
        await web.TCPSite(runner, host, port).start()
    except BaseException:
        await runner.cleanup()
        raise
    log.info("OpenAI-compatible HTTP on %s", ", ".join(map(str, runner.addresses)))
    return runner


async def list_models(request: web.Request) -> web.Response:
    models = [
        {"id": name, "object": "model", "created": 0, "owned_by": "agentserve"}
        for name in request.app[CORE].model_names
    ]
    return web.json_response({"object": "list", "data": models})


async def chat_completions(request: web.Request) -> web.StreamResponse:
    chat = parse_chat_request(await _json_body(request))
    session_id = parse_session_id(request.headers.get("X-Session-Id"))
    tenant = request.headers.get("X-Tenant", "")
    core = request.app[CORE]
    headers = {}
    if session_id is not None:
        events = request.app[SESSIONS].turn(session_id, chat.messages, chat.sampling, tenant=tenant)
        headers["X-Session-Id"] = session_id
    else:
        events = core.complete(render_chat(core, chat.messages), chat.sampling, tenant=tenant)
    fmt = ReplyFormat.new("chat", chat.model or _served_model(core), chat.include_usage)
    return await _respond(request, events, fmt, chat.stream, headers)


async def completions(request: web.Request) -> web.StreamResponse:
    core = request.app[CORE]
    req = parse_completion_request(await _json_body(request), core.tokenizer.vocab_size)
    prompt_ids = list(req.prompt) if isinstance(req.prompt, tuple) else core.tokenizer.encode(req.prompt, add_bos=True)
    events = core.complete(prompt_ids, req.sampling, tenant=request.headers.get("X-Tenant", ""))
    fmt = ReplyFormat.new("text", req.model or _served_model(core), req.include_usage)
    return await _respond(request, events, fmt, req.stream, {})


async def close_session(request: web.Request) -> web.Response:
    session_id = parse_session_id(request.match_info["session_id"])
    if session_id is None:
        raise ValueError("session id is empty")
    turns, tokens = await request.app[SESSIONS].close(session_id)
    return web.json_response({"id": session_id, "object": "session.deleted", "turns": turns, "tokens": tokens})


async def health(request: web.Request) -> web.Response:
    return web.json_response({"status": "ok"})


def render_chat(core: CoreAPI, messages: tuple[Message, ...]) -> list[int]:
    """Token ids of the whole conversation in the model's chat template, ready for generation."""
    text = core.tokenizer.apply_chat_template([m.template_dict() for m in messages], add_generation_prompt=True)
    return core.tokenizer.encode(text)


async def _respond(
    request: web.Request,
    events: AsyncGenerator[TurnEventAPI, None],
    fmt: ReplyFormat,
    stream: bool,
    headers: dict[str, str],
) -> web.StreamResponse:
    if stream:
        return await stream_reply(request, events, fmt, headers)
    reply = Reply()
    async with aclosing(events) as turn:
        async for event in turn:
            reply.add(event)
    if reply.trace_id:
        headers["X-Trace-Id"] = reply.trace_id
    return web.json_response(fmt.full(reply), headers=headers)


async def _json_body(request: web.Request) -> dict[str, Any]:
    # read() raises HTTPRequestEntityTooLarge past client_max_size; the middleware answers it.
    return parse_json_object(await request.read())


def _served_model(core: CoreAPI) -> str:
    return core.model_names[0] if core.model_names else "agentserve"
