"""Server-sent events: the framing OpenAI streams use, and writing one reply as a stream.

Each event is `data: <json>\\n\\n`; the stream ends with `data: [DONE]\\n\\n`. The response is
prepared only after the core produced its first event, so errors raised before any token (a bad
prompt, no engine) still become a proper HTTP status. An error after that can only be reported
inside the stream, as an `{"error": ...}` event, which the openai client raises as an APIError.
"""

from __future__ import annotations

import json
import logging
from collections.abc import AsyncGenerator, AsyncIterator, Mapping
from contextlib import aclosing
from typing import Any

from aiohttp import web

from agentserve.scheduler.http.choices import Tagged
from agentserve.scheduler.http.errors import error_response
from agentserve.scheduler.http.responses import Reply, ReplyFormat

log = logging.getLogger(__name__)

DONE = b"data: [DONE]\n\n"
SSE_HEADERS = {
    "Content-Type": "text/event-stream",
    "Cache-Control": "no-cache",
    "X-Accel-Buffering": "no",  # proxies must not hold tokens back
}


def encode_event(payload: Mapping[str, Any]) -> bytes:
    return b"data: " + json.dumps(payload, separators=(",", ":"), ensure_ascii=False).encode() + b"\n\n"


def decode_events(body: bytes | str) -> list[Any]:
    """The payloads of an SSE body, `[DONE]` included as the string "[DONE]" (for tests and tools)."""
    text = body.decode() if isinstance(body, bytes) else body
    events = []
    for block in text.split("\n\n"):
        data = "\n".join(line[len("data:") :].lstrip() for line in block.split("\n") if line.startswith("data:"))
        if data:
            events.append(data if data == "[DONE]" else json.loads(data))
    return events


async def stream_reply(
    request: web.Request,
    events: AsyncGenerator[Tagged, None],
    fmt: ReplyFormat,
    n: int = 1,
    headers: Mapping[str, str] | None = None,
) -> web.StreamResponse:
    """Send the `n` choices' tagged `events` as an OpenAI SSE stream; returns the finished response."""
    replies = [Reply(index=i) for i in range(n)]
    async with aclosing(events) as stream:
        try:
            first = await anext(stream)
        except StopAsyncIteration:
            first = None
        response = web.StreamResponse(headers={**SSE_HEADERS, **(headers or {})})
        if first is not None and first[1].metadata is not None and first[1].metadata.trace_id:
            response.headers["X-Trace-Id"] = first[1].metadata.trace_id
        await response.prepare(request)
        try:
            await _send_all(response, fmt, replies, first, stream)
        except ConnectionResetError:
            log.info("client went away mid-stream; turn abandoned")
            return response
        except Exception as exc:
            status, body = error_response(exc)
            if status == 500:
                log.exception("turn failed mid-stream")
            else:
                log.warning("turn failed mid-stream (%d): %s", status, body["error"]["message"])
            await _write_quietly(response, encode_event(body))
        await _write_quietly(response, DONE)
        await _write_quietly(response, None)
    return response


async def _send_all(
    response: web.StreamResponse,
    fmt: ReplyFormat,
    replies: list[Reply],
    first: Tagged | None,
    rest: AsyncIterator[Tagged],
) -> None:
    """The choices' role chunks, `first` and the `rest` of the events, each choice's finish, usage."""
    for reply in replies:
        role = fmt.role_chunk(reply.index)
        if role is not None:
            await response.write(encode_event(role))
    if first is not None:
        await _send(response, fmt, replies, first)
        async for tagged in rest:
            await _send(response, fmt, replies, tagged)
    for reply in replies:
        if not reply.finished:  # the stream ended without a final event: still close the choice
            await response.write(encode_event(fmt.finish_chunk(None, reply.index)))
    if fmt.include_usage:
        await response.write(encode_event(fmt.usage_chunk(replies)))


async def _send(response: web.StreamResponse, fmt: ReplyFormat, replies: list[Reply], tagged: Tagged) -> None:
    index, event = tagged
    reply = replies[index]
    reply.add(event)
    for chunk in fmt.stream_chunks(reply, event):
        await response.write(encode_event(chunk))


async def _write_quietly(response: web.StreamResponse, data: bytes | None) -> None:
    """Write `data`, or end the stream when None; a client that left is not an error."""
    try:
        if data is None:
            await response.write_eof()
        else:
            await response.write(data)
    except ConnectionResetError:
        pass
