"""The OpenAI-compatible HTTP gateway: routes that translate HTTP to scheduler-core calls.

Routes:
  GET  /v1/models                 the served models
  POST /v1/chat/completions       with `X-Session-Id`: a turn of that server-side session (see
                                  `sessions.py` for which messages are forwarded); without it: a
                                  stateless completion of the whole rendered chat template
  POST /v1/completions            always stateless; `prompt` is text or token ids
  DELETE /v1/sessions/{id}        close a session (an agentserve extension)
  GET  /health                    readiness: 200 once a prefill and a decode engine are registered
                                  (engines register after their warm-up generation), else 503
                                  with what is missing

With API keys configured (`AGENTSERVE_API_KEYS`), every route but `/health` needs
`Authorization: Bearer <key>` (else 401) and the tenant is the key's; a session id then names one
of that tenant's sessions only. Without keys, `X-Tenant` (optional) names the tenant whose cache
the request may share. Bodies over `max_body_bytes` are 413, deeper than 64 levels or with a lone
surrogate 400; overload is 429 with `Retry-After`. Responses carry
`X-Trace-Id` (the turn's OpenTelemetry trace: the caller's, if the request carries a W3C
`traceparent`) and, in session mode, `X-Session-Id`. A session's opening request may say what agent
it is: `X-Agent-Id`, `X-Agent-Parents`, `X-Agent-Critical`, `X-Agent-Priority` (`agent_headers.py`).
With several schedulers (a `SessionRouter`), a request naming a session runs on the session's home
scheduler: one that reaches another is passed there as it came (`forwarding.py`), and the answer
carries `X-Agentserve-Scheduler`, the id of the scheduler that ran it.
Every error is an OpenAI-style `{"error": {...}}` body; a bad request never takes the server down.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncGenerator, Callable
from contextlib import aclosing
from typing import Any

from aiohttp import web

from agentserve.common.api_keys import ApiKeys
from agentserve.common.errors import NotFoundError
from agentserve.common.http_auth import KEYS, api_key_auth, caller
from agentserve.common.http_errors import middlewares
from agentserve.common.http_guard import ConnectionLimits, serve_guarded
from agentserve.common.json_body import parse_json_object_async
from agentserve.scheduler.forwarding import FORWARDED, SERVED_BY, HomeUnreachable, SessionRouter
from agentserve.scheduler.http.agent_headers import parse_agent_headers
from agentserve.scheduler.http.choices import Tagged, choice_sampling, merged
from agentserve.scheduler.http.core_api import CoreAPI
from agentserve.scheduler.http.errors import GATEWAY_ERRORS
from agentserve.scheduler.http.responses import Reply, ReplyFormat
from agentserve.scheduler.http.schemas import (
    Message,
    parse_chat_request,
    parse_completion_request,
    parse_session_id,
)
from agentserve.scheduler.http.sessions import ChatSessions
from agentserve.scheduler.http.sse import stream_reply
from agentserve.scheduler.http.tools import ToolSettings

log = logging.getLogger(__name__)

# An agent conversation resent in full is ~4 bytes per token: 4 MB holds a 1M-token context.
MAX_BODY_BYTES = 4 << 20
# Prompts rendered from more text than this are tokenized on a worker thread, off the event loop.
OFFLOAD_CHARS = 16 << 10
CORE = web.AppKey("core", CoreAPI)
SESSIONS = web.AppKey("sessions", ChatSessions)
ROUTER = web.AppKey("router", SessionRouter)


def build_app(
    core: CoreAPI,
    keys: ApiKeys = ApiKeys(),
    max_body_bytes: int = MAX_BODY_BYTES,
    router: SessionRouter | None = None,
) -> web.Application:
    app = web.Application(client_max_size=max_body_bytes, middlewares=middlewares(GATEWAY_ERRORS, api_key_auth(keys)))
    app[KEYS] = keys
    app[CORE] = core
    app[SESSIONS] = ChatSessions(core)
    if router is not None:
        app[ROUTER] = router
    app.router.add_get("/v1/models", list_models)
    app.router.add_post("/v1/chat/completions", chat_completions)
    app.router.add_post("/v1/completions", completions)
    app.router.add_delete("/v1/sessions/{session_id}", close_session)
    app.router.add_get("/health", health)
    return app


async def start_http(
    core: CoreAPI,
    host: str,
    port: int,
    keys: ApiKeys = ApiKeys(),
    max_body_bytes: int = MAX_BODY_BYTES,
    limits: ConnectionLimits = ConnectionLimits(),
    *,
    router: SessionRouter | None = None,
) -> web.AppRunner:
    """Serve the gateway on host:port (port 0 picks a free one; see `runner.addresses`), slow and
    greedy clients bounded by `limits` (`common/http_guard.py`), each session's requests run on its
    home scheduler with a `router`.

    The caller owns the runner and stops it with `await runner.cleanup()`.
    """
    runner = await serve_guarded(build_app(core, keys, max_body_bytes, router), host, port, limits)
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
    core = request.app[CORE]
    model = served_model(core, chat.model)
    session_id = parse_session_id(request.headers.get("X-Session-Id"))
    agent = parse_agent_headers(request.headers)
    who = caller(request)
    headers: dict[str, str] = {}
    if session_id is not None:
        if chat.n != 1:
            raise ValueError("'n' must be 1 with X-Session-Id: a session continues one history")
        home = await _home_answer(request, session_id, who.owner, headers)
        if home is not None:
            return home
        sessions = request.app[SESSIONS]
        events = merged(
            1,
            lambda _: sessions.turn(
                session_id,
                chat.messages,
                chat.sampling,
                who.tenant,
                chat.tools.tools,
                who.owner,
                agent,
                segments=chat.segments,
            ),
        )
        headers["X-Session-Id"] = session_id
    else:
        if agent is not None:
            raise ValueError("X-Agent-* headers describe a session: send them with X-Session-Id")
        prompt = await _off_loop_if_large(
            sum(len(m.content) for m in chat.messages), render_chat, core, chat.messages, chat.tools
        )
        events = merged(
            chat.n,
            lambda i: core.complete(
                prompt, choice_sampling(chat.sampling, i), tenant=who.tenant, segments=chat.segments
            ),
        )
    fmt = ReplyFormat.new(
        "chat",
        model,
        chat.include_usage,
        parse_tools=chat.tools.parse_calls,
        token_text=_token_text(core) if chat.sampling.logprobs is not None else None,
        grammar_calls=chat.tools.grammar_calls,
    )
    return await _respond(request, events, fmt, chat.n, chat.stream, headers)


async def completions(request: web.Request) -> web.StreamResponse:
    core = request.app[CORE]
    req = parse_completion_request(await _json_body(request), core.tokenizer.vocab_size)
    model = served_model(core, req.model)
    if isinstance(req.prompt, tuple):
        prompt_ids = list(req.prompt)
    else:
        prompt_ids = await _off_loop_if_large(len(req.prompt), core.tokenizer.encode, req.prompt, add_bos=True)
    tenant = caller(request).tenant
    events = merged(req.n, lambda i: core.complete(prompt_ids, choice_sampling(req.sampling, i), tenant=tenant))
    token_text = _token_text(core) if req.sampling.logprobs is not None else None
    fmt = ReplyFormat.new("text", model, req.include_usage, token_text=token_text)
    return await _respond(request, events, fmt, req.n, req.stream, {})


async def close_session(request: web.Request) -> web.StreamResponse:
    session_id = parse_session_id(request.match_info["session_id"])
    if session_id is None:
        raise ValueError("session id is empty")
    owner, headers = caller(request).owner, dict[str, str]()
    home = await _home_answer(request, session_id, owner, headers)
    if home is not None:
        return home
    turns, tokens = await request.app[SESSIONS].close(session_id, owner)
    body = {"id": session_id, "object": "session.deleted", "turns": turns, "tokens": tokens}
    return web.json_response(body, headers=headers)


async def _home_answer(
    request: web.Request, session_id: str, owner: str, headers: dict[str, str]
) -> web.StreamResponse | None:
    """With several schedulers: the session's home scheduler's answer to this request, when that
    is another one; None when it runs here (a session without a home is claimed here: the request
    may open it), with `SERVED_BY` added to `headers`."""
    router = request.app.get(ROUTER)
    if router is None:
        return None
    located = await router.route(session_id, owner, forwarded=FORWARDED in request.headers, create=True)
    while located.peer is not None:
        try:
            return await router.proxy_http(located.peer, request)
        except HomeUnreachable:
            located = await router.after_unreachable(session_id, owner, located, create=True)
    if located.reloaded:
        request.app[SESSIONS].forget(session_id, owner)  # the session's progress is in its record
    headers[SERVED_BY] = router.scheduler_id
    return None


async def health(request: web.Request) -> web.Response:
    missing = request.app[CORE].missing_engines()
    if missing:
        body = {"status": "unavailable", "missing": missing, "message": f"waiting for {' and '.join(missing)}"}
        return web.json_response(body, status=503)
    return web.json_response({"status": "ok"})


def served_model(core: CoreAPI, requested: str | None) -> str:
    """The model a request names (the served one when it names none); 404 for any other."""
    names = core.model_names
    if requested is None:
        return names[0] if names else "agentserve"
    if requested not in names:
        raise NotFoundError(
            f"The model {requested!r} does not exist; this server serves {', '.join(map(repr, names))}",
            code="model_not_found",
        )
    return requested


def render_chat(core: CoreAPI, messages: tuple[Message, ...], tools: ToolSettings = ToolSettings()) -> list[int]:
    """Token ids of the whole conversation in the model's chat template, ready for generation."""
    text = core.tokenizer.apply_chat_template(
        [m.template_dict() for m in messages], add_generation_prompt=True, tools=tools.prompt_tools
    )
    return core.tokenizer.encode(text)


async def _respond(
    request: web.Request,
    events: AsyncGenerator[Tagged, None],
    fmt: ReplyFormat,
    n: int,
    stream: bool,
    headers: dict[str, str],
) -> web.StreamResponse:
    if stream:
        return await stream_reply(request, events, fmt, n, headers)
    replies = [Reply(index=i) for i in range(n)]
    async with aclosing(events) as turn:
        async for index, event in turn:
            replies[index].add(event)
    if replies[0].trace_id:
        headers["X-Trace-Id"] = replies[0].trace_id
    return web.json_response(fmt.full(replies), headers=headers)


async def _json_body(request: web.Request) -> dict[str, Any]:
    # read() raises HTTPRequestEntityTooLarge past client_max_size (413, answered by the middleware)
    # as soon as that many bytes arrived, or at once when Content-Length says so.
    return await parse_json_object_async(await request.read())


async def _off_loop_if_large(chars: int, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
    """`fn(*args, **kwargs)`, on a worker thread when it works on more than OFFLOAD_CHARS of text."""
    if chars <= OFFLOAD_CHARS:
        return fn(*args, **kwargs)
    return await asyncio.to_thread(fn, *args, **kwargs)


def _token_text(core: CoreAPI) -> Callable[[int], str]:
    return lambda token_id: core.tokenizer.decode([token_id], skip_special_tokens=False)
