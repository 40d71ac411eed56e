"""The gateway's API keys, size limits and overload answers, over loopback against a fake core."""

from __future__ import annotations

import json

import pytest

from agentserve.common.api_keys import ApiKeys
from agentserve.common.errors import Overloaded
from tests.unit.scheduler_http.fakes import FakeCore, serve

pytestmark = pytest.mark.integration

KEY = "as-gateway-test-key-0123456789"
KEYS = ApiKeys.parse([f"acme:{KEY}"])
CHAT = {"messages": [{"role": "user", "content": "hi"}], "max_tokens": 3}


def test_every_route_but_health_needs_a_key_with_keys_on() -> None:
    async def scenario(client):
        out = {}
        for name, headers in {
            "none": {},
            "wrong": {"Authorization": "Bearer as-not-a-key-000000000000"},
            "basic": {"Authorization": f"Basic {KEY}"},
        }.items():
            for path in ("/v1/models", "/v1/chat/completions", "/v1/completions", "/v1/sessions/s1"):
                method = client.get if path == "/v1/models" else client.delete if "sessions" in path else client.post
                resp = await method(path, json=CHAT, headers=headers)
                out[(name, path)] = (resp.status, resp.headers.get("WWW-Authenticate"), (await resp.json())["error"])
        health = await client.get("/health")
        return out, health.status

    out, health_status = serve(FakeCore(), scenario, keys=KEYS)
    messages = {
        "none": "missing API key: send 'Authorization: Bearer <key>'",
        "wrong": "invalid API key",
        "basic": "the Authorization value must be 'Bearer <key>'",
    }
    for (name, _path), (status, challenge, error) in out.items():
        assert (status, challenge, error["message"], error["code"]) == (
            401,
            "Bearer",
            messages[name],
            "invalid_api_key",
        )
    assert health_status == 200


def test_the_tenant_is_the_keys_and_a_different_x_tenant_is_refused() -> None:
    core = FakeCore()
    auth = {"Authorization": f"Bearer {KEY}"}

    async def scenario(client):
        ok = await client.post("/v1/chat/completions", json=CHAT, headers=auth)
        same = await client.post(
            "/v1/completions", json={"prompt": "x", "max_tokens": 2}, headers={**auth, "X-Tenant": "acme"}
        )
        other = await client.post("/v1/chat/completions", json=CHAT, headers={**auth, "X-Tenant": "beta"})
        return ok.status, same.status, other.status, (await other.json())["error"]["message"]

    ok, same, other, message = serve(core, scenario, keys=KEYS)
    assert (ok, same, other) == (200, 200, 400)
    assert message == "X-Tenant 'beta' does not match the API key's tenant; the tenant comes from the key"
    assert [tenant for _, _, tenant in core.completed] == ["acme", "acme"]


def test_bodies_over_the_byte_limit_are_413_and_deep_or_surrogate_json_400() -> None:
    async def scenario(client):
        big = await client.post("/v1/chat/completions", data=b"x" * 5000)
        deep = await client.post("/v1/chat/completions", data=b"[" * 1000 + b"]" * 1000)
        lone = await client.post(
            "/v1/chat/completions", data=b'{"messages": [{"role": "user", "content": "\\ud800"}], "max_tokens": 2}'
        )
        return [(r.status, (await r.json())["error"]["message"]) for r in (big, deep, lone)]

    big, deep, lone = serve(FakeCore(), scenario, max_body_bytes=4096)
    assert big[0] == 413 and "4096" in big[1]
    assert deep == (400, "request body nests deeper than 64 levels")
    assert lone[0] == 400 and "lone UTF-16 surrogate" in lone[1]


@pytest.mark.parametrize("stream", [False, True])
def test_overload_is_429_with_retry_after(stream) -> None:
    core = FakeCore()
    core.fail_before = Overloaded("tenant 'acme' is over its rate of 2 turns/s (burst 3)", retry_after_s=2.2)

    async def scenario(client):
        resp = await client.post("/v1/chat/completions", data=json.dumps({**CHAT, "stream": stream}))
        return resp.status, resp.headers.get("Retry-After"), (await resp.json())["error"]

    status, retry_after, error = serve(core, scenario)
    assert (status, retry_after) == (429, "3")
    assert (error["type"], error["code"]) == ("rate_limit_error", "rate_limit_exceeded")


@pytest.mark.parametrize(("depth", "message"), [(100, "nests deeper than 64 levels"), (5000, "JSON object encoded")])
def test_deep_tool_call_arguments_are_400(depth, message) -> None:
    arguments = '{"a": ' + "[" * depth + "]" * depth + "}"
    call = {"id": "c1", "type": "function", "function": {"name": "f", "arguments": arguments}}
    messages = [
        {"role": "user", "content": "hi"},
        {"role": "assistant", "content": None, "tool_calls": [call]},
        {"role": "tool", "content": "done", "tool_call_id": "c1"},
    ]

    async def scenario(client):
        resp = await client.post("/v1/chat/completions", json={"messages": messages, "max_tokens": 2})
        return resp.status, (await resp.json())["error"]["message"]

    status, error = serve(FakeCore(), scenario)
    assert status == 400 and message in error and "messages[1].tool_calls[0].function.arguments" in error
