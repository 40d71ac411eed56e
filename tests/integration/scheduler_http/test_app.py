"""The gateway's routes over loopback HTTP against a fake core."""

from __future__ import annotations

import asyncio
import json

import aiohttp
import pytest

from agentserve.common.errors import RetryableError
from agentserve.scheduler.http.app import start_http
from agentserve.scheduler.http.sse import decode_events
from tests.unit.scheduler_http.fakes import REPLY, FakeCore, serve

pytestmark = pytest.mark.integration

USER = [{"role": "user", "content": "hi"}]


def test_models_lists_the_core_models():
    async def scenario(client):
        resp = await client.get("/v1/models")
        return resp.status, await resp.json()

    status, body = serve(FakeCore(), scenario)
    assert status == 200
    assert body["object"] == "list" and [m["id"] for m in body["data"]] == ["tiny-llama"]


def test_stateless_chat_renders_the_whole_conversation():
    core = FakeCore()

    async def scenario(client):
        resp = await client.post(
            "/v1/chat/completions",
            json={"messages": USER, "max_tokens": 5, "temperature": 0},
            headers={"X-Tenant": "acme"},
        )
        return resp.status, resp.headers, await resp.json()

    status, headers, body = serve(core, scenario)
    assert status == 200 and headers["X-Trace-Id"] == "0af7651916cd43dd8448eb211c80319c"
    assert body["object"] == "chat.completion" and body["model"] == "tiny-llama"
    assert body["choices"] == [
        {"index": 0, "message": {"role": "assistant", "content": "hello"}, "logprobs": None, "finish_reason": "length"}
    ]
    prompt = core.tokenizer.encode("<user>hi\n<assistant>")
    assert body["usage"] == {
        "prompt_tokens": len(prompt),
        "completion_tokens": 5,
        "total_tokens": len(prompt) + 5,
        "prompt_tokens_details": {"cached_tokens": 0},
    }
    ids, sampling, tenant = core.completed[0]
    assert (ids, sampling.max_tokens, sampling.temperature, tenant) == (prompt, 5, 0.0, "acme")
    assert core.sessions == {}


def test_chat_stream_is_openai_sse_with_usage_last():
    async def scenario(client):
        resp = await client.post(
            "/v1/chat/completions", json={"messages": USER, "stream": True, "stream_options": {"include_usage": True}}
        )
        return resp.status, resp.headers["Content-Type"], await resp.read()

    status, content_type, raw = serve(FakeCore(), scenario)
    assert status == 200 and content_type.startswith("text/event-stream")
    assert raw.endswith(b"data: [DONE]\n\n")
    events = decode_events(raw)
    assert events[-1] == "[DONE]"
    chunks = events[:-1]
    assert chunks[0]["choices"][0]["delta"] == {"role": "assistant", "content": ""}
    assert "".join(c["choices"][0]["delta"].get("content", "") for c in chunks if c["choices"]) == REPLY
    assert chunks[-2]["choices"][0]["finish_reason"] == "stop"
    assert chunks[-1]["choices"] == [] and chunks[-1]["usage"]["completion_tokens"] == len(REPLY)
    assert all(c["usage"] is None for c in chunks[:-1])
    assert len({c["id"] for c in chunks}) == 1


def test_session_header_sends_only_new_messages():
    core = FakeCore()
    system = {"role": "system", "content": "be brief"}

    async def scenario(client):
        history = [system, {"role": "user", "content": "first"}]
        for question in ("second", "third"):
            resp = await client.post(
                "/v1/chat/completions", json={"messages": history, "temperature": 0}, headers={"X-Session-Id": "conv-1"}
            )
            assert resp.status == 200 and resp.headers["X-Session-Id"] == "conv-1"
            answer = (await resp.json())["choices"][0]["message"]
            history = [*history, answer, {"role": "user", "content": question}]
        resp = await client.post(
            "/v1/chat/completions", json={"messages": history, "stream": True}, headers={"X-Session-Id": "conv-1"}
        )
        last = decode_events(await resp.read())
        return (await (await client.delete("/v1/sessions/conv-1")).json()), last

    closed, last = serve(core, scenario)
    assert closed["turns"] == 3 and "conv-1" not in core.sessions
    assert last[-1] == "[DONE]"
    assert core.completed == []


def test_session_turns_report_cached_tokens():
    core = FakeCore()

    async def scenario(client):
        usages = []
        history = USER
        for _ in range(2):
            resp = await client.post("/v1/chat/completions", json={"messages": history}, headers={"X-Session-Id": "s"})
            body = await resp.json()
            usages.append(body["usage"])
            history = [*history, body["choices"][0]["message"], {"role": "user", "content": "more"}]
        return usages

    first, second = serve(core, scenario)
    assert first["prompt_tokens_details"]["cached_tokens"] == 0
    assert second["prompt_tokens_details"]["cached_tokens"] == first["total_tokens"]


def test_completions_text_and_token_prompts():
    core = FakeCore()

    async def scenario(client):
        text = await (await client.post("/v1/completions", json={"prompt": "ab", "max_tokens": 3})).json()
        ids = await client.post("/v1/completions", json={"prompt": [5, 6], "stream": True})
        return text, decode_events(await ids.read())

    text, streamed = serve(core, scenario)
    assert text["object"] == "text_completion" and text["choices"][0]["text"] == "hel"
    assert text["choices"][0]["finish_reason"] == "length"
    assert [p for p, _, _ in core.completed] == [[1, ord("a") + 2, ord("b") + 2], [5, 6]]
    assert "".join(e["choices"][0]["text"] for e in streamed[:-1]) == REPLY
    assert streamed[-2]["choices"][0]["finish_reason"] == "stop"


@pytest.mark.parametrize(
    "path, data, status, match",
    [
        ("/v1/chat/completions", b"{bad json", 400, "not valid JSON"),
        ("/v1/chat/completions", b"[]", 400, "JSON object"),
        ("/v1/chat/completions", json.dumps({"messages": []}).encode(), 400, "messages"),
        ("/v1/chat/completions", json.dumps({"messages": USER, "max_tokens": 0}).encode(), 400, "max_tokens"),
        ("/v1/chat/completions", json.dumps({"messages": USER, "max_tokens": 10**9}).encode(), 400, "max_tokens"),
        ("/v1/chat/completions", json.dumps({"messages": USER, "temperature": "x"}).encode(), 400, "temperature"),
        ("/v1/completions", json.dumps({"prompt": [999]}).encode(), 400, "prompt"),
        (
            "/v1/chat/completions",
            json.dumps(
                {
                    "messages": USER,
                    "response_format": {"type": "json_schema", "json_schema": {"name": "n", "schema": {"type": "x"}}},
                }
            ).encode(),
            400,
            "'response_format.json_schema.schema' is not a usable JSON Schema: Invalid type: x",
        ),
        ("/v1/nothing", b"{}", 404, "Not Found"),
    ],
)
def test_bad_requests_get_openai_errors_and_the_server_stays_up(path, data, status, match):
    async def scenario(client):
        resp = await client.post(path, data=data, headers={"Content-Type": "application/json"})
        ok = await client.post("/v1/chat/completions", json={"messages": USER})
        return resp.status, await resp.json(), ok.status

    got, body, after = serve(FakeCore(), scenario)
    assert got == status and match in body["error"]["message"]
    assert body["error"]["type"] == "invalid_request_error"
    assert after == 200


def test_oversize_body_is_rejected():
    async def scenario(client):
        resp = await client.post("/v1/chat/completions", data=b"x" * 2048, headers={"Content-Type": "application/json"})
        return resp.status, await resp.json()

    status, body = serve(FakeCore(), scenario, max_body_bytes=1024)
    assert status == 413 and "exceeded" in body["error"]["message"]


def test_session_errors():
    async def scenario(client):
        bad = await client.post("/v1/chat/completions", json={"messages": USER}, headers={"X-Session-Id": "a b"})
        await client.post("/v1/chat/completions", json={"messages": USER}, headers={"X-Session-Id": "s"})
        stale = await client.post("/v1/chat/completions", json={"messages": USER}, headers={"X-Session-Id": "s"})
        missing = await client.delete("/v1/sessions/nope")
        blank = await client.delete("/v1/sessions/%20")
        return [(r.status, (await r.json())["error"]["message"]) for r in (bad, stale, missing, blank)]

    (bad, bad_msg), (stale, stale_msg), (missing, missing_msg), (blank, blank_msg) = serve(FakeCore(), scenario)
    assert bad == 400 and "X-Session-Id" in bad_msg
    assert stale == 400 and "already holds 1" in stale_msg
    assert missing == 404 and "unknown session" in missing_msg
    assert (blank, blank_msg) == (400, "session id is empty")


def test_retryable_core_errors_are_503_before_the_stream_starts():
    core = FakeCore()
    core.fail_before = RetryableError("no healthy decode engine")

    async def scenario(client):
        plain = await client.post("/v1/chat/completions", json={"messages": USER})
        streamed = await client.post("/v1/chat/completions", json={"messages": USER, "stream": True})
        return plain.status, streamed.status, await streamed.json()

    plain, streamed, body = serve(core, scenario)
    assert plain == streamed == 503
    assert body["error"] == {
        "message": "no healthy decode engine",
        "type": "service_unavailable_error",
        "param": None,
        "code": None,
    }


def test_failure_mid_stream_is_an_error_event_then_done():
    core = FakeCore()
    core.fail_after = RetryableError("decode engine died")

    async def scenario(client):
        resp = await client.post("/v1/chat/completions", json={"messages": USER, "stream": True})
        return resp.status, decode_events(await resp.read())

    status, events = serve(core, scenario)
    assert status == 200
    assert events[-2]["error"]["message"] == "decode engine died" and events[-1] == "[DONE]"


def test_unexpected_core_bug_is_500_without_internals():
    core = FakeCore()
    core.fail_before = KeyError("secret internals")

    async def scenario(client):
        resp = await client.post("/v1/chat/completions", json={"messages": USER})
        return resp.status, await resp.json()

    status, body = serve(core, scenario)
    assert status == 500 and "secret" not in body["error"]["message"]


def test_start_http_binds_and_cleans_up():
    async def main():
        runner = await start_http(FakeCore(), "127.0.0.1", 0)
        host, port = runner.addresses[0][:2]
        async with aiohttp.ClientSession() as http, http.get(f"http://{host}:{port}/v1/models") as resp:
            status = resp.status
        await runner.cleanup()
        return status

    assert asyncio.run(main()) == 200
