"""OpenAI strict mode on the whole system (`up --local`'s processes on loopback) through the official
`openai` client, unchanged: strict function tools under tool_choice "auto" (what the OpenAI Agents SDK
and pydantic-ai send), the client's `parse` helper with a pydantic model (a strict json_schema),
a strict schema that breaks OpenAI's rules (400 naming its path), and a forced call cut by max_tokens
(no raw tool-call markup in the content)."""

from __future__ import annotations

import json

import jsonschema
import openai
import pydantic
import pytest

pytestmark = pytest.mark.integration

SEEDS = range(8)


class Trip(pydantic.BaseModel):
    city: str
    days: int


class Lookup(pydantic.BaseModel):
    """Look a word up in the glossary."""

    word: str
    limit: int


LOOKUP_TOOL = openai.pydantic_function_tool(Lookup, name="lookup")
LOOKUP_SCHEMA = LOOKUP_TOOL["function"]["parameters"]
MESSAGES = [{"role": "user", "content": "Look up the word 'cache' in the glossary, then plan a trip."}]


@pytest.fixture(scope="module")
def client(shared_cluster_one_decode):
    with openai.OpenAI(
        base_url=f"http://127.0.0.1:{shared_cluster_one_decode.ports.http}/v1",
        api_key="unused",
        max_retries=0,
        timeout=300,
    ) as opened:
        yield opened


def test_strict_tools_under_auto_give_text_or_calls_with_valid_arguments(client):
    assert LOOKUP_TOOL["function"]["strict"] is True
    model = client.models.list().data[0].id
    for seed in SEEDS:
        reply = client.chat.completions.create(
            model=model, messages=MESSAGES, tools=[LOOKUP_TOOL], temperature=1.0, seed=seed, max_tokens=96
        )
        message = reply.choices[0].message
        assert "<tool_call>" not in (message.content or "")
        for call in message.tool_calls or []:
            assert call.function.name == "lookup"
            jsonschema.validate(json.loads(call.function.arguments), LOOKUP_SCHEMA)
    # The tiny model rarely opens a call by itself; the required choice below always does (and
    # tests/unit/engine/test_grammar.py drives the auto grammar through a call that the model completes).
    forced = client.chat.completions.create(
        model=model, messages=MESSAGES, tools=[LOOKUP_TOOL], tool_choice="required", temperature=1.0, seed=0
    )
    assert forced.choices[0].finish_reason == "tool_calls"
    arguments = json.loads(forced.choices[0].message.tool_calls[0].function.arguments)
    assert Lookup.model_validate(arguments) and set(arguments) == {"word", "limit"}


def test_the_parse_helper_returns_the_typed_model(client):
    model = client.models.list().data[0].id
    for seed in SEEDS:
        reply = client.chat.completions.parse(
            model=model, messages=MESSAGES, response_format=Trip, temperature=1.0, seed=seed, max_tokens=64
        )
        assert reply.choices[0].finish_reason == "stop"
        assert isinstance(reply.choices[0].message.parsed, Trip)


def test_a_strict_schema_breaking_openais_rules_is_a_400_naming_the_path(client):
    loose = {"type": "object", "properties": {"user": {"type": "object", "properties": {"id": {"type": "integer"}}}}}
    bad_format = {"type": "json_schema", "json_schema": {"name": "t", "schema": loose, "strict": True}}
    with pytest.raises(openai.BadRequestError) as err:
        client.chat.completions.create(model="m", messages=MESSAGES, response_format=bad_format)
    assert "response_format.json_schema.schema: additionalProperties must be false" in err.value.message
    tool = {"type": "function", "function": {"name": "f", "parameters": loose, "strict": True}}
    with pytest.raises(openai.BadRequestError) as err:
        client.chat.completions.create(model="m", messages=MESSAGES, tools=[tool])
    assert "tools[0].function.parameters: additionalProperties must be false" in err.value.message


def test_a_forced_call_cut_by_max_tokens_is_no_raw_markup(client):
    model = client.models.list().data[0].id
    reply = client.chat.completions.create(
        model=model,
        messages=MESSAGES,
        tools=[LOOKUP_TOOL],
        tool_choice={"type": "function", "function": {"name": "lookup"}},
        max_tokens=6,
    )
    choice = reply.choices[0]
    assert choice.finish_reason == "length"
    assert not choice.message.content and not choice.message.tool_calls
