"""The gateway's agent-facing surface against a fake core: readiness, model names, tool calls
(whole and streamed), `n` choices and fields the server does not honour."""

from __future__ import annotations

import json

import pytest

from agentserve.scheduler.http.sse import decode_events
from tests.unit.scheduler_http.fakes import FakeCore, serve

pytestmark = pytest.mark.integration

USER = [{"role": "user", "content": "weather?"}]
TOOLS = [{"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object"}}}]
CALL = '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call>'


def _post(path, body):
    async def scenario(client):
        resp = await client.post(path, json=body)
        return resp.status, (await resp.read())

    return scenario


def test_health_is_503_naming_what_is_missing_until_engines_register():
    core = FakeCore()
    core.missing = ["prefill engine", "decode engine"]

    async def scenario(client):
        before = await client.get("/health")
        core.missing = []
        after = await client.get("/health")
        models = await client.get("/v1/models")
        return before.status, await before.json(), after.status, await after.json(), models.status

    before, body, after, ok, models = serve(core, scenario)
    assert (before, after, models) == (503, 200, 200)
    assert body == {
        "status": "unavailable",
        "missing": ["prefill engine", "decode engine"],
        "message": "waiting for prefill engine and decode engine",
    }
    assert ok == {"status": "ok"}


@pytest.mark.parametrize("path", ["/v1/chat/completions", "/v1/completions"])
def test_unknown_model_is_404_model_not_found(path):
    body = {"model": "gpt-4o", "messages": USER} if "chat" in path else {"model": "gpt-4o", "prompt": "x"}
    status, raw = serve(FakeCore(), _post(path, body))
    assert status == 404
    assert json.loads(raw) == {
        "error": {
            "message": "The model 'gpt-4o' does not exist; this server serves 'tiny-llama'",
            "type": "invalid_request_error",
            "param": None,
            "code": "model_not_found",
        }
    }


def test_unsupported_field_is_400_naming_it():
    status, raw = serve(FakeCore(), _post("/v1/chat/completions", {"messages": USER, "logit_bias": {}}))
    assert status == 400
    assert json.loads(raw)["error"]["message"].startswith("unsupported field 'logit_bias'; this server accepts")


def test_tools_are_rendered_and_the_call_comes_back_as_tool_calls():
    core = FakeCore(reply="Checking. " + CALL)
    body = {"model": "tiny-llama", "messages": USER, "tools": TOOLS, "max_tokens": 200}
    status, raw = serve(core, _post("/v1/chat/completions", body))
    assert status == 200
    prompt = core.tokenizer.encode(f"<tools>{json.dumps(TOOLS)}\n<user>weather?\n<assistant>")
    assert core.completed[0][0] == prompt
    choice = json.loads(raw)["choices"][0]
    assert choice["finish_reason"] == "tool_calls"
    assert choice["message"]["content"] == "Checking."
    [call] = choice["message"]["tool_calls"]
    assert call["type"] == "function" and call["id"].startswith("call_")
    assert call["function"] == {"name": "get_weather", "arguments": '{"city": "Paris"}'}


def test_tool_choice_none_keeps_the_tools_in_the_prompt_and_returns_plain_text():
    core = FakeCore(reply=CALL)
    body = {"messages": USER, "tools": TOOLS, "tool_choice": "none", "max_tokens": 200}
    status, raw = serve(core, _post("/v1/chat/completions", body))
    assert core.completed[0][0] == core.tokenizer.encode(f"<tools>{json.dumps(TOOLS)}\n<user>weather?\n<assistant>")
    choice = json.loads(raw)["choices"][0]
    assert (status, choice["message"], choice["finish_reason"]) == (200, {"role": "assistant", "content": CALL}, "stop")


def test_streamed_tool_call_is_one_indexed_delta_then_finish_reason_tool_calls():
    core = FakeCore(reply="Checking. " + CALL + "\n" + CALL)
    body = {"messages": USER, "tools": TOOLS, "max_tokens": 200, "stream": True}
    status, raw = serve(core, _post("/v1/chat/completions", body))
    chunks = [e for e in decode_events(raw) if e != "[DONE]"]
    deltas = [c["choices"][0]["delta"] for c in chunks]
    assert status == 200 and deltas[0] == {"role": "assistant", "content": ""}
    assert "".join(d.get("content", "") for d in deltas) == "Checking."
    calls = [d["tool_calls"][0] for d in deltas if "tool_calls" in d]
    assert [c["index"] for c in calls] == [0, 1]
    assert all(c["function"] == {"name": "get_weather", "arguments": '{"city": "Paris"}'} for c in calls)
    assert calls[0]["id"] != calls[1]["id"]
    assert chunks[-1]["choices"][0]["finish_reason"] == "tool_calls"


def test_tool_calls_in_history_reach_the_template_with_decoded_arguments():
    core = FakeCore()
    call = {"id": "c1", "type": "function", "function": {"name": "get_weather", "arguments": '{"city": "Paris"}'}}
    messages = [*USER, {"role": "assistant", "content": None, "tool_calls": [call]}, {"role": "tool", "content": "18C"}]
    status, _ = serve(core, _post("/v1/chat/completions", {"messages": messages, "tools": TOOLS}))
    rendered = bytes(i - 2 for i in core.completed[0][0]).decode()
    assert status == 200
    assert '<assistant><call>{"name": "get_weather", "arguments": {"city": "Paris"}}\n<tool>18C\n' in rendered


def test_n_choices_are_separate_generations_with_consecutive_seeds():
    core = FakeCore()
    body = {"messages": USER, "n": 3, "seed": 7, "max_tokens": 5}
    status, raw = serve(core, _post("/v1/chat/completions", body))
    reply = json.loads(raw)
    assert status == 200 and [c["index"] for c in reply["choices"]] == [0, 1, 2]
    assert sorted(s.seed for _, s, _ in core.completed) == [7, 8, 9]
    assert reply["usage"]["completion_tokens"] == 15

    status, raw = serve(FakeCore(), _post("/v1/completions", {"prompt": "x", "n": 2, "stream": True}))
    chunks = [e for e in decode_events(raw) if e != "[DONE]"]
    finishes = sorted(c["choices"][0]["index"] for c in chunks if c["choices"][0]["finish_reason"])
    assert status == 200 and finishes == [0, 1]


def test_a_session_opens_with_its_tools_and_keeps_them():
    core = FakeCore(reply=CALL)
    headers = {"X-Session-Id": "s1"}

    async def scenario(client):
        first = await client.post(
            "/v1/chat/completions", json={"messages": USER, "tools": TOOLS, "max_tokens": 200}, headers=headers
        )
        history = [*USER, {"role": "assistant", "content": "x"}, {"role": "tool", "content": "18C"}]
        other = [{"type": "function", "function": {"name": "other"}}]
        changed = await client.post("/v1/chat/completions", json={"messages": history, "tools": other}, headers=headers)
        many = await client.post("/v1/chat/completions", json={"messages": history, "n": 2}, headers=headers)
        return await first.json(), changed.status, await changed.json(), many.status, await many.json()

    first, changed, changed_body, many, many_body = serve(core, scenario)
    assert core.sessions["s1"].tools == TOOLS
    assert first["choices"][0]["message"]["tool_calls"][0]["function"]["name"] == "get_weather"
    assert (changed, many) == (400, 400)
    assert "'tools' differ from the ones it started with" in changed_body["error"]["message"]
    assert "'n' must be 1 with X-Session-Id" in many_body["error"]["message"]


def test_chat_logprobs_name_each_token_with_its_alternatives():
    body = {"messages": USER, "max_tokens": 2, "logprobs": True, "top_logprobs": 1}
    status, raw = serve(FakeCore(reply="hi"), _post("/v1/chat/completions", body))
    entry = {
        "token": "h",
        "logprob": -0.5,
        "bytes": [104],
        "top_logprobs": [{"token": "h", "logprob": -0.5, "bytes": [104]}],
    }
    content = json.loads(raw)["choices"][0]["logprobs"]["content"]
    assert status == 200 and content[0] == entry and [c["token"] for c in content] == ["h", "i"]

    body = {"messages": USER, "max_tokens": 2, "logprobs": True, "stream": True}
    status, raw = serve(FakeCore(reply="hi"), _post("/v1/chat/completions", body))
    streamed = [c["choices"][0]["logprobs"] for c in decode_events(raw)[:-1] if c["choices"][0]["logprobs"]]
    assert [e["token"] for lp in streamed for e in lp["content"]] == ["h", "i"]


def test_completion_logprobs_are_openais_legacy_shape():
    body = {"prompt": "x", "max_tokens": 2, "logprobs": 1}
    status, raw = serve(FakeCore(reply="hi"), _post("/v1/completions", body))
    assert status == 200
    assert json.loads(raw)["choices"][0]["logprobs"] == {
        "tokens": ["h", "i"],
        "token_logprobs": [-0.5, -0.5],
        "top_logprobs": [{"h": -0.5}, {"i": -0.5}],
        "text_offset": [0, 1],
    }
