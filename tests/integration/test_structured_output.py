"""Structured output on the whole system (local processes on loopback) with the official `openai`
client: 100 seeded samples at temperature 1.0 from the random-weight default model, sent at once so
the decode engines batch them, each of them parsing against its schema (a named tool_choice comes
back as exactly one parsed `tool_calls` entry); bad schemas are 400 over HTTP and INVALID_ARGUMENT
over gRPC."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import grpc
import jsonschema
import openai
import pytest
from openai.types.chat.chat_completion import Choice

from agentserve.v1 import common_pb2, scheduler_pb2, scheduler_pb2_grpc

pytestmark = pytest.mark.integration

SAMPLES = 100
# A nested object, an enum, an integer range and an array, every string and list bounded, so even
# random weights reach the end well inside MAX_TOKENS (escapes included, a sample stays under ~150).
TICKET = {
    "type": "object",
    "properties": {
        "priority": {"enum": ["low", "medium", "high"]},
        "retries": {"type": "integer", "minimum": 0, "maximum": 9},
        "labels": {"type": "array", "items": {"enum": ["bug", "ui", "perf", "docs"]}, "minItems": 1, "maxItems": 3},
        "owner": {
            "type": "object",
            "properties": {"team": {"type": "string", "maxLength": 12}, "oncall": {"type": "boolean"}},
            "required": ["team", "oncall"],
            "additionalProperties": False,
        },
    },
    "required": ["priority", "retries", "labels", "owner"],
    "additionalProperties": False,
}
WEATHER = {
    "type": "object",
    "properties": {
        "city": {"type": "string", "maxLength": 12},
        "unit": {"enum": ["celsius", "fahrenheit"]},
        "days": {"type": "integer", "minimum": 1, "maximum": 14},
        "hours": {"type": "array", "items": {"type": "integer", "minimum": 0, "maximum": 23}, "maxItems": 4},
        "place": {
            "type": "object",
            "properties": {"country": {"enum": ["FR", "DE", "JP"]}, "coastal": {"type": "boolean"}},
            "required": ["country", "coastal"],
            "additionalProperties": False,
        },
    },
    "required": ["city", "unit", "days", "hours", "place"],
    "additionalProperties": False,
}
TOOLS = [
    {"type": "function", "function": {"name": "get_weather", "description": "Forecast", "parameters": WEATHER}},
    {"type": "function", "function": {"name": "get_time", "parameters": {"type": "object", "properties": {}}}},
]
MAX_TOKENS = 256


@pytest.fixture(scope="module")
def cluster(shared_cluster):
    return shared_cluster


def _sample_all(cluster, messages: list[dict[str, str]], **request: Any) -> list[Choice]:
    """The choices of SAMPLES concurrent requests, seeds 0..SAMPLES-1, temperature 1.0."""

    async def run() -> list[Choice]:
        base_url = f"http://127.0.0.1:{cluster.ports.http}/v1"
        async with openai.AsyncOpenAI(base_url=base_url, api_key="unused", max_retries=0, timeout=300) as client:
            model = (await client.models.list()).data[0].id
            replies = await asyncio.gather(
                *(
                    client.chat.completions.create(
                        model=model, messages=messages, temperature=1.0, seed=seed, max_tokens=MAX_TOKENS, **request
                    )
                    for seed in range(SAMPLES)
                )
            )
        return [reply.choices[0] for reply in replies]

    return asyncio.run(run())


def test_json_schema_replies_always_match_the_schema(cluster):
    response_format = {"type": "json_schema", "json_schema": {"name": "ticket", "schema": TICKET, "strict": True}}
    messages = [{"role": "user", "content": "File a ticket for the flaky cache test, as JSON."}]
    choices = _sample_all(cluster, messages, response_format=response_format)
    assert [c.finish_reason for c in choices] == ["stop"] * SAMPLES  # the grammar ended every one
    for choice in choices:
        jsonschema.validate(json.loads(choice.message.content), TICKET)


def test_named_tool_choice_always_calls_that_function_with_valid_arguments(cluster):
    choice = {"type": "function", "function": {"name": "get_weather"}}
    messages = [{"role": "user", "content": "What is the weather in Paris this week?"}]
    choices = _sample_all(cluster, messages, tools=TOOLS, tool_choice=choice)
    assert [c.finish_reason for c in choices] == ["tool_calls"] * SAMPLES
    for choice in choices:
        # Exactly one call and no text: the gateway parsed the whole reply as one hermes block.
        assert choice.message.content is None and len(choice.message.tool_calls) == 1
        function = choice.message.tool_calls[0].function
        assert function.name == "get_weather"
        jsonschema.validate(json.loads(function.arguments), WEATHER)


def test_bad_schemas_are_rejected_before_any_engine_runs(cluster):
    client = openai.OpenAI(base_url=f"http://127.0.0.1:{cluster.ports.http}/v1", api_key="unused", max_retries=0)
    bad = {"type": "json_schema", "json_schema": {"name": "t", "schema": {"type": "array", "uniqueItems": True}}}
    with pytest.raises(openai.BadRequestError) as err:
        client.chat.completions.create(model="m", messages=[{"role": "user", "content": "hi"}], response_format=bad)
    assert "'response_format.json_schema.schema' is not a usable JSON Schema" in err.value.message
    with pytest.raises(openai.BadRequestError) as err:
        client.chat.completions.create(
            model="m",
            messages=[{"role": "user", "content": "hi"}],
            tools=TOOLS,
            tool_choice={"type": "function", "function": {"name": "get_stock"}},
        )
    assert "'tool_choice' names function 'get_stock', which is not in 'tools'" in err.value.message

    # gRPC clients reach the engines directly: the prefill engine refuses the grammar.
    structured = common_pb2.StructuredOutput(
        kind=common_pb2.StructuredOutput.KIND_JSON_SCHEMA, schema='{"type": "integer", "minimum": 3, "maximum": 1}'
    )
    with grpc.insecure_channel(f"127.0.0.1:{cluster.ports.scheduler}") as channel:
        stub = scheduler_pb2_grpc.SchedulerStub(channel)
        session = stub.OpenSession(scheduler_pb2.OpenSessionRequest(tenant="bad-schema")).session_id
        request = scheduler_pb2.TurnRequest(
            session_id=session, message="hi", sampling=common_pb2.SamplingParams(max_tokens=8, structured=structured)
        )
        with pytest.raises(grpc.RpcError) as rpc_err:
            list(stub.Turn(request))
    assert rpc_err.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "the response schema is not a usable JSON Schema: Unsatisfiable schema" in rpc_err.value.details()
