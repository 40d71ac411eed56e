"""The OpenAI surface agents and benchmark clients use, against real services on loopback with the
official `openai` client: readiness, model names, exact lengths, stop strings, logprobs, `n`,
unsupported fields, and a two-turn tool-calling exchange whose tool runs behind the tool proxy."""

from __future__ import annotations

import json
import time
import urllib.request

import openai
import pytest

from agentserve.cluster.readiness import http_health
from agentserve.engine.default_model import ensure_default_model
from agentserve.model_files.tokenizer import Tokenizer
from tests.support.cluster import local_cluster
from tests.support.tails import cached_history

pytestmark = pytest.mark.integration

MODEL = "agentserve-tiny"
ECHO = {
    "type": "function",
    "function": {
        "name": "echo",
        "description": "Returns its arguments.",
        "parameters": {
            "type": "object",
            "properties": {"text": {"type": "string", "maxLength": 12}},
            "required": ["text"],
            # Closed: without it the grammar lets the model add keys of its own until max_tokens.
            "additionalProperties": False,
        },
    },
}


def _health_until(port: int, missing: list[str], timeout_s: float = 120.0) -> tuple[int, dict]:
    deadline = time.monotonic() + timeout_s
    while True:
        status, body = http_health(port)
        if body.get("missing", []) == missing or time.monotonic() > deadline:
            return status, body
        time.sleep(0.2)


@pytest.fixture(scope="module")
def staged(tmp_path_factory):
    """A cluster started in stages (no engine, a prefill engine, all), and what /health said at each."""
    with local_cluster(tmp_path_factory, "openai", decoders=1, before="prefill") as running:
        health = [http_health(running.ports.http)]
        running.start(timeout_s=240, before="decode-0")
        health.append(_health_until(running.ports.http, ["decode engine"]))
        running.start(timeout_s=240)
        health.append(http_health(running.ports.http))
        yield running, health


@pytest.fixture(scope="module")
def cluster(staged):
    return staged[0]


@pytest.fixture(scope="module")
def client(cluster) -> openai.OpenAI:
    return openai.OpenAI(base_url=f"http://127.0.0.1:{cluster.ports.http}/v1", api_key="unused", max_retries=0)


@pytest.fixture(scope="module")
def tokenizer() -> Tokenizer:
    return Tokenizer.from_dir(ensure_default_model())


def test_health_is_503_until_a_prefill_and_a_decode_engine_registered(staged, client):
    waiting = "waiting for prefill engine and decode engine"
    assert staged[1] == [
        (503, {"status": "unavailable", "missing": ["prefill engine", "decode engine"], "message": waiting}),
        (503, {"status": "unavailable", "missing": ["decode engine"], "message": "waiting for decode engine"}),
        (200, {"status": "ok"}),
    ]
    assert [m.id for m in client.models.list().data] == [MODEL]


def test_unknown_model_is_404_model_not_found(client):
    with pytest.raises(openai.NotFoundError) as err:
        client.chat.completions.create(model="gpt-4o", messages=[{"role": "user", "content": "hi"}])
    assert err.value.code == "model_not_found"
    assert err.value.body["message"] == "The model 'gpt-4o' does not exist; this server serves 'agentserve-tiny'"


def test_unsupported_field_is_400_naming_it(client):
    with pytest.raises(openai.BadRequestError) as err:
        client.chat.completions.create(model=MODEL, messages=[{"role": "user", "content": "hi"}], frequency_penalty=0.5)
    assert err.value.body["message"].startswith("unsupported field 'frequency_penalty'; this server accepts")


@pytest.mark.parametrize("max_tokens", [1, 7, 40])
def test_ignore_eos_and_max_tokens_give_exactly_that_many_tokens(client, max_tokens):
    messages = [{"role": "user", "content": "Count the files."}]
    extra = {"ignore_eos": True}
    whole = client.chat.completions.create(
        model=MODEL, messages=messages, max_tokens=max_tokens, logprobs=True, extra_body=extra
    )
    assert whole.usage.completion_tokens == max_tokens and len(whole.choices[0].logprobs.content) == max_tokens
    assert whole.choices[0].finish_reason == "length"
    stream = client.chat.completions.create(
        model=MODEL, messages=messages, max_tokens=max_tokens, stream=True, stream_options={"include_usage": True},
        temperature=1.0, seed=max_tokens, extra_body=extra,
    )  # fmt: skip
    assert [c.usage.completion_tokens for c in stream if c.usage] == [max_tokens]
    text = client.completions.create(
        model=MODEL, prompt="def f():", max_tokens=max_tokens, logprobs=0, extra_body=extra
    )
    assert text.usage.completion_tokens == len(text.choices[0].logprobs.tokens) == max_tokens
    # aiperf's other way to ask for a fixed length: no stop before min_tokens.
    held = client.completions.create(
        model=MODEL, prompt="x", max_tokens=max_tokens, extra_body={"min_tokens": max_tokens}
    )
    assert held.usage.completion_tokens == max_tokens


def test_stop_string_cuts_the_text_before_it(client):
    messages = [{"role": "user", "content": "Tell me about caches."}]
    free = client.chat.completions.create(
        model=MODEL, messages=messages, max_tokens=30, temperature=0, extra_body={"ignore_eos": True}
    )
    text = free.choices[0].message.content
    stop = next(text[i : i + 3] for i in range(5, len(text) - 3) if text[i : i + 3].strip() == text[i : i + 3])
    expected = text[: text.index(stop)]
    cut = client.chat.completions.create(model=MODEL, messages=messages, max_tokens=30, temperature=0, stop=[stop])
    assert (cut.choices[0].message.content, cut.choices[0].finish_reason) == (expected, "stop")
    assert cut.usage.completion_tokens < 30
    stream = client.chat.completions.create(
        model=MODEL, messages=messages, max_tokens=30, temperature=0, stop=stop, stream=True
    )
    chunks = [c.choices[0] for c in stream if c.choices]
    assert "".join(c.delta.content or "" for c in chunks) == expected and chunks[-1].finish_reason == "stop"


def test_greedy_logprobs_name_the_likeliest_token(client):
    reply = client.chat.completions.create(
        model=MODEL, messages=[{"role": "user", "content": "hi"}], max_tokens=8, temperature=0,
        logprobs=True, top_logprobs=3, extra_body={"ignore_eos": True},
    )  # fmt: skip
    content = reply.choices[0].logprobs.content
    assert len(content) == 8
    for entry in content:
        assert [t.logprob for t in entry.top_logprobs] == sorted((t.logprob for t in entry.top_logprobs), reverse=True)
        assert entry.top_logprobs[0].token == entry.token and entry.top_logprobs[0].logprob == entry.logprob < 0
    assert "".join(e.token for e in content) == reply.choices[0].message.content


def test_n_choices_are_seeded_and_reproducible(client):
    def ask():
        reply = client.chat.completions.create(
            model=MODEL, messages=[{"role": "user", "content": "Name a file."}], max_tokens=12, n=3,
            temperature=1.0, seed=42, extra_body={"ignore_eos": True},
        )  # fmt: skip
        return [c.message.content for c in reply.choices], reply.usage.completion_tokens

    (first, tokens), (again, _) = ask(), ask()
    assert first == again and len(set(first)) == 3 and tokens == 36


def test_agent_loop_in_a_session_feeds_a_tool_proxy_result_back(cluster, client, tokenizer):
    """An agent on a server-side session: a turn with tools, the tool run through the tool proxy
    under the session's id, its result sent back as a `tool` message. The session's prompt grows by
    exactly the template's rendering of that result, and its earlier blocks come from cache."""
    session = {"X-Session-Id": "agent-loop-1"}
    messages: list[dict] = [{"role": "user", "content": "What does echo say?"}]
    first = client.chat.completions.create(
        model=MODEL, messages=messages, tools=[ECHO], max_tokens=12, temperature=0,
        extra_body={"ignore_eos": True}, extra_headers=session,
    )  # fmt: skip
    opening = tokenizer.encode(tokenizer.apply_chat_template(messages, tools=[ECHO]))
    assert (first.usage.prompt_tokens, first.usage.completion_tokens) == (len(opening), 12)

    result = json.dumps(_call_tool(cluster, "echo", {"text": "cache"}, session))
    assert result == '{"text": "cache"}'
    messages += [
        {"role": "assistant", "content": first.choices[0].message.content or ""},
        {"role": "tool", "tool_call_id": "call_1", "content": result},
    ]
    second = client.chat.completions.create(
        model=MODEL, messages=messages, tools=[ECHO], max_tokens=4, temperature=0,
        extra_body={"ignore_eos": True}, extra_headers=session,
    )  # fmt: skip
    # The first turn ended by length, so the template's close of the reply comes first.
    appended = tokenizer.encode(
        f"<|im_end|>\n<|im_start|>user\n<tool_response>\n{result}\n</tool_response><|im_end|>\n<|im_start|>assistant\n"
    )
    history = len(opening) + 12
    assert second.usage.prompt_tokens == history + len(appended)
    assert second.usage.prompt_tokens_details.cached_tokens == cached_history(history)


def _call_tool(cluster, name: str, arguments: dict, headers: dict | None = None) -> dict:
    request = urllib.request.Request(
        f"http://127.0.0.1:{cluster.ports.toolproxy_http}/tools/{name}",
        data=json.dumps(arguments).encode(),
        headers={"Content-Type": "application/json", **(headers or {})},
    )
    with urllib.request.urlopen(request, timeout=30) as reply:
        return json.loads(reply.read())


def test_two_turn_tool_call_through_the_tool_proxy(cluster, client, tokenizer):
    """Turn 1 is forced to call `echo` (a named tool_choice decodes under the tool's grammar, so
    even the tiny model calls it); the agent runs the call through the tool proxy and sends the
    result back; turn 2's prompt is exactly the template's rendering of that conversation."""
    messages: list[dict] = [{"role": "user", "content": "Echo the word cache."}]
    first = client.chat.completions.create(
        model=MODEL, messages=messages, tools=[ECHO], max_tokens=128, temperature=0,
        tool_choice={"type": "function", "function": {"name": "echo"}},
    )  # fmt: skip
    choice = first.choices[0]
    [call] = choice.message.tool_calls
    assert (choice.finish_reason, call.type, call.function.name) == ("tool_calls", "function", "echo")
    assert choice.message.content is None and call.id.startswith("call_")
    arguments = json.loads(call.function.arguments)
    assert set(arguments) == {"text"} and isinstance(arguments["text"], str) and len(arguments["text"]) <= 12

    result = json.dumps(_call_tool(cluster, "echo", arguments))
    assert json.loads(result) == arguments
    messages += [
        choice.message.model_dump(include={"role", "content", "tool_calls"}),
        {"role": "tool", "tool_call_id": call.id, "content": result},
    ]
    second = client.chat.completions.create(
        model=MODEL, messages=messages, tools=[ECHO], max_tokens=16, temperature=0, extra_body={"ignore_eos": True}
    )
    rendered = tokenizer.apply_chat_template(
        [
            messages[0],
            {
                "role": "assistant",
                "content": "",
                "tool_calls": [{"function": {"name": "echo", "arguments": arguments}}],
            },
            messages[2],
        ],
        tools=[ECHO],
    )
    assert f"<tool_response>\n{result}\n</tool_response>" in rendered
    assert second.usage.prompt_tokens == len(tokenizer.encode(rendered))
    # Same prompt, same greedy reply: the server answered exactly that rendering.
    same = client.completions.create(
        model=MODEL, prompt=tokenizer.encode(rendered), max_tokens=16, temperature=0, extra_body={"ignore_eos": True}
    )
    assert second.choices[0].message.content == same.choices[0].text
