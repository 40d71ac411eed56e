"""The official openai client parses what the gateway sends (plain, streamed, with a session)."""

from __future__ import annotations

import openai
import pytest

from tests.unit.scheduler_http.fakes import REPLY, FakeCore, serve

pytestmark = pytest.mark.integration

USER = [{"role": "user", "content": "hi"}]


def _client(test_client) -> openai.AsyncOpenAI:
    return openai.AsyncOpenAI(base_url=str(test_client.make_url("/v1")), api_key="unused", max_retries=0)


def test_openai_client_chat_plain_and_streamed():
    async def scenario(test_client):
        async with _client(test_client) as client:
            models = await client.models.list()
            plain = await client.chat.completions.create(model="tiny-llama", messages=USER, max_tokens=8)
            stream = await client.chat.completions.create(
                model="tiny-llama", messages=USER, stream=True, stream_options={"include_usage": True}
            )
            chunks = [chunk async for chunk in stream]
            text = await client.completions.create(model="tiny-llama", prompt="ab", max_tokens=3)
        return [m.id for m in models.data], plain, chunks, text

    models, plain, chunks, text = serve(FakeCore(), scenario)
    assert models == ["tiny-llama"]
    assert plain.choices[0].message.content == REPLY[:8] and plain.choices[0].finish_reason == "length"
    assert plain.usage.prompt_tokens_details.cached_tokens == 0
    assert "".join(c.choices[0].delta.content or "" for c in chunks if c.choices) == REPLY
    assert chunks[-1].usage.completion_tokens == len(REPLY)
    assert text.choices[0].text == REPLY[:3]


def test_openai_client_sees_errors_as_exceptions():
    async def scenario(test_client):
        async with _client(test_client) as client:
            with pytest.raises(openai.BadRequestError, match="max_tokens"):
                await client.chat.completions.create(model="m", messages=USER, max_tokens=10**9)

    serve(FakeCore(), scenario)


def test_openai_client_multi_turn_session():
    core = FakeCore()

    async def scenario(test_client):
        async with _client(test_client) as client:
            messages = list(USER)
            for question in ("and then?", "why?"):
                reply = await client.chat.completions.create(
                    model="tiny-llama", messages=messages, extra_headers={"X-Session-Id": "agent-7"}
                )
                messages += [
                    reply.choices[0].message.model_dump(exclude_none=True),
                    {"role": "user", "content": question},
                ]
            return reply

    last = serve(core, scenario)
    assert [m for _, m in core.sessions["agent-7"].turns] == ["hi", "and then?"]
    assert last.usage.prompt_tokens_details.cached_tokens > 0
