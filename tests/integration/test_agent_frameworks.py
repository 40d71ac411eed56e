"""The agent frameworks people build agents on, unchanged, against the whole system (`up --local`'s
processes on loopback): the OpenAI Agents SDK (a function tool under `Runner.run` and
`Runner.run_streamed`, a handoff between two agents, `output_type`), pydantic-ai (`output_type` and a
tool), LangGraph's prebuilt ReAct agent over `langchain-openai`'s `ChatOpenAI`, and the openai
client's `parse` helper. Every framework keeps its defaults, strict schemas and tool_choice
included (none sets one: pydantic-ai sends its own "required"); the tests ask for temperature 0
where the framework takes it.

The cluster serves the `tiny-agent` model: the tiny architecture trained further on generated agent
transcripts (`training.agent_transcripts`), which never ask about the word asked here. So the model
itself decides to call `lookup` first, and after the result to answer (the response_format's JSON,
pydantic-ai's `final_result` tool, or text that ends LangGraph's agent loop). It is a 4-layer model
on a few hundred thousand tokens: the structure is learnt, the word it looks up need not be the
question's, so the tests check arguments against the schema, not their values.

Each test records the calls its tool really received, checks their arguments against the schema the
framework declared, and checks the run ended with the typed final output."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Iterator
from typing import Any, TypeVar

import agents
import jsonschema
import openai
import pydantic
import pytest
from langchain_core.messages import ToolMessage
from langchain_core.tools import tool as langchain_tool
from langchain_openai import ChatOpenAI
from langgraph.prebuilt import create_react_agent
from pydantic_ai import Agent as PydanticAgent
from pydantic_ai.models.openai import OpenAIChatModel
from pydantic_ai.providers.openai import OpenAIProvider
from pydantic_ai.settings import ModelSettings as PydanticModelSettings

from agentserve.engine.model_catalog import TINY_AGENT, resolve_model
from tests.support.cluster import local_cluster

pytestmark = pytest.mark.integration

T = TypeVar("T")
MAX_ROUNDS = 10  # the Agents SDK's default max_turns
QUESTION = "What does 'cache' mean in the glossary?"
INSTRUCTIONS = "Look words up in the glossary, then answer with the word and its meaning."


class Answer(pydantic.BaseModel):
    word: str
    meaning: str


# The parameters every framework declares for `lookup(word: str)`, titles aside.
LOOKUP_PARAMETERS = {
    "type": "object",
    "properties": {"word": {"type": "string"}},
    "required": ["word"],
    "additionalProperties": False,
}


def definition(word: str) -> str:
    return f"{word}: a store that keeps recent results close"


class Glossary:
    """A tool's body: it records each call's arguments and answers from a fixed text."""

    def __init__(self) -> None:
        self.calls: list[dict[str, Any]] = []

    def lookup(self, word: str) -> str:
        """Look a word up in the glossary."""
        self.calls.append({"word": word})
        return definition(word)

    def check_calls(self) -> None:
        """At least one call ran, each with arguments that match LOOKUP_PARAMETERS."""
        assert self.calls, "the tool never ran"
        for arguments in self.calls:
            jsonschema.validate(arguments, LOOKUP_PARAMETERS)


@pytest.fixture(scope="module")
def base_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """`up --local`'s cluster (one prefill and one decode engine) serving the agent model."""
    model = resolve_model(TINY_AGENT)
    with local_cluster(
        tmp_path_factory, "agents", decoders=1, model_dir=model.source, model_name=model.name
    ) as running:
        yield f"http://127.0.0.1:{running.ports.http}/v1"


@pytest.fixture(scope="module")
def model_name(base_url) -> str:
    with openai.OpenAI(base_url=base_url, api_key="unused") as client:
        return client.models.list().data[0].id


@pytest.fixture(scope="module")
def no_agents_tracing() -> Iterator[None]:
    """The Agents SDK exports traces to OpenAI's platform by default; here there is none to reach."""
    agents.set_tracing_disabled(True)
    yield
    agents.set_tracing_disabled(False)


def _run_agents(base_url: str, model_name: str, run: Callable[[agents.Model], Awaitable[T]]) -> T:
    """`run(model)` on its own event loop, `model` being the SDK's model class for any Chat
    Completions server (the SDK's default is OpenAI's Responses API); its client closes in the loop."""

    async def main() -> T:
        async with openai.AsyncOpenAI(base_url=base_url, api_key="unused") as client:
            return await run(agents.OpenAIChatCompletionsModel(model=model_name, openai_client=client))

    return asyncio.run(main())


def _glossary_agent(glossary: Glossary, model: agents.Model) -> agents.Agent[Any]:
    """An agent with the `lookup` tool whose final output is an Answer: the SDK's defaults but temperature 0."""
    return agents.Agent(
        name="glossary",
        instructions=INSTRUCTIONS,
        tools=[agents.function_tool(glossary.lookup, name_override="lookup")],
        output_type=Answer,
        model=model,
        model_settings=agents.ModelSettings(temperature=0),
    )


@pytest.mark.usefixtures("no_agents_tracing")
def test_openai_agents_runner_run_calls_the_tool_and_ends_with_the_output_type(base_url, model_name):
    glossary = Glossary()

    async def run(model: agents.Model) -> agents.RunResult:
        agent = _glossary_agent(glossary, model)
        lookup = agent.tools[0]
        assert isinstance(lookup, agents.FunctionTool) and lookup.strict_json_schema  # the SDK's default
        return await agents.Runner.run(agent, QUESTION)

    result = _run_agents(base_url, model_name, run)

    glossary.check_calls()
    assert isinstance(result.final_output, Answer)
    outputs = [item.output for item in result.new_items if isinstance(item, agents.ToolCallOutputItem)]
    assert outputs == [definition(call["word"]) for call in glossary.calls]


@pytest.mark.usefixtures("no_agents_tracing")
def test_openai_agents_run_streamed_streams_the_tool_call_and_the_output_type(base_url, model_name):
    glossary = Glossary()

    async def run(model: agents.Model) -> tuple[agents.RunResultStreaming, list[str]]:
        streamed = agents.Runner.run_streamed(_glossary_agent(glossary, model), QUESTION)
        kinds = [event.item.type async for event in streamed.stream_events() if event.type == "run_item_stream_event"]
        return streamed, kinds

    result, kinds = _run_agents(base_url, model_name, run)

    glossary.check_calls()
    assert kinds == ["tool_call_item", "tool_call_output_item"] * len(glossary.calls) + ["message_output_item"]
    assert isinstance(result.final_output, Answer)


@pytest.mark.usefixtures("no_agents_tracing")
def test_openai_agents_handoff_passes_the_run_to_the_agent_that_calls_the_tool(base_url, model_name):
    glossary = Glossary()
    agents_by_name: dict[str, agents.Agent[Any]] = {}

    async def run(model: agents.Model) -> agents.RunResult:
        specialist = _glossary_agent(glossary, model)
        triage = agents.Agent(
            name="triage",
            instructions="Hand glossary questions to the glossary agent.",
            handoffs=[specialist],
            output_type=Answer,
            model=model,
            model_settings=agents.ModelSettings(temperature=0),
        )
        agents_by_name.update(triage=triage, glossary=specialist)
        return await agents.Runner.run(triage, QUESTION)

    result = _run_agents(base_url, model_name, run)

    assert result.last_agent is agents_by_name["glossary"]
    handoffs = [item for item in result.new_items if isinstance(item, agents.HandoffOutputItem)]
    assert [(item.source_agent.name, item.target_agent.name) for item in handoffs] == [("triage", "glossary")]
    glossary.check_calls()
    assert isinstance(result.final_output, Answer)


def test_pydantic_ai_agent_calls_the_tool_and_ends_with_the_output_type(base_url, model_name):
    glossary = Glossary()

    model = OpenAIChatModel(model_name, provider=OpenAIProvider(base_url=base_url, api_key="unused"))
    settings = PydanticModelSettings(temperature=0)
    agent = PydanticAgent(model, output_type=Answer, instructions=INSTRUCTIONS, model_settings=settings)
    agent.tool_plain(name="lookup")(glossary.lookup)

    result = agent.run_sync(QUESTION)

    glossary.check_calls()
    assert isinstance(result.output, Answer)
    returns = [part for message in result.all_messages() for part in message.parts if part.part_kind == "tool-return"]
    assert [part.tool_name for part in returns][:1] == ["lookup"]


# The prebuilt ReAct agent the issue names; LangGraph 1.x points to langchain's create_agent instead.
@pytest.mark.filterwarnings("ignore:create_react_agent has been moved")
def test_langgraph_react_agent_over_chat_openai_calls_the_tool_and_ends_with_the_response_format(base_url, model_name):
    glossary = Glossary()
    lookup = langchain_tool("lookup", description="Look a word up in the glossary.")(glossary.lookup)
    llm = ChatOpenAI(model=model_name, base_url=base_url, api_key="unused", temperature=0)
    agent = create_react_agent(llm, tools=[lookup], prompt=INSTRUCTIONS, response_format=Answer)

    state = agent.invoke({"messages": [("user", QUESTION)]})

    glossary.check_calls()
    assert [m.name for m in state["messages"] if isinstance(m, ToolMessage)][:1] == ["lookup"]
    assert isinstance(state["structured_response"], Answer)


class Lookup(pydantic.BaseModel):
    """Look a word up in the glossary."""

    word: str


def test_openai_parse_helper_parses_the_tool_calls_and_the_final_answer(base_url, model_name):
    """The client's loop: each reply's calls parsed as Lookup and answered, until the reply is the
    parsed Answer (strict tools beside a response_format: the model may call or answer)."""
    glossary = Glossary()
    tools = [openai.pydantic_function_tool(Lookup, name="lookup")]
    messages: list[Any] = [{"role": "system", "content": INSTRUCTIONS}, {"role": "user", "content": QUESTION}]
    with openai.OpenAI(base_url=base_url, api_key="unused") as client:
        for _ in range(MAX_ROUNDS):
            reply = client.chat.completions.parse(
                model=model_name, messages=messages, tools=tools, response_format=Answer, temperature=0
            ).choices[0]
            if reply.finish_reason != "tool_calls":
                break
            messages.append(reply.message.model_dump(exclude_none=True, include={"role", "content", "tool_calls"}))
            for call in reply.message.tool_calls:
                assert isinstance(call.function.parsed_arguments, Lookup)
                result = glossary.lookup(call.function.parsed_arguments.word)
                messages.append({"role": "tool", "tool_call_id": call.id, "content": result})

    glossary.check_calls()
    assert reply.finish_reason == "stop"
    assert isinstance(reply.message.parsed, Answer)
