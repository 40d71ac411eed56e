"""Generated agent transcripts: tool calls in the shapes agent frameworks send, for the agent model.

Each transcript is one request's conversation as the gateway hands it to the chat template (tools
as sent, earlier calls' arguments decoded to objects, results as `tool` messages), so the model
learns the Hermes markup of `model_files.presets.CHAT_TEMPLATE` on the prompts it is served:

- a user question the first assistant turn answers by calling the tool the question is about,
  its arguments copied from the question, among distractor tools;
- a `tool` result, then the final answer: a call to a declared final-output tool (pydantic-ai's
  `final_result`) when there is one, else the answer as a JSON object (what a `response_format`
  grammar decodes, and plain text for a framework that asks for text);
- a handoff (the Agents SDK's `transfer_to_<agent>`): the first agent calls the transfer tool,
  the second, with its own tools, calls its tool after the transfer's result;
- a structured follow-up (LangGraph's `response_format` step): the finished conversation without
  tools or system prompt, answered once more as the JSON object.

Tool schemas come in each framework's dialect (titles or none, `additionalProperties`, `strict`,
a description inside `parameters`). Everything is drawn from one seeded generator, so a seed gives
the same transcripts. `HELD_OUT_WORDS` never appear as glossary words: the integration tests ask
about them, so what they check is behaviour the model generalised, not a memorised exchange.
"""

from __future__ import annotations

import json
import random
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

Message = dict[str, Any]
Tool = dict[str, Any]

HELD_OUT_WORDS = ("cache",)  # none of them is in WORDS
FINAL_TOOL = "final_result"
FINAL_TOOL_DESCRIPTION = "The final response which ends this conversation"


def _words(text: str) -> tuple[str, ...]:
    return tuple(text.split())


WORDS = _words(
    "buffer queue socket thread kernel shard replica token lease quorum mutex index cursor packet "
    "router gateway proxy daemon signal pointer bucket ledger snapshot checkpoint journal batch "
    "stream channel tensor vector matrix scalar gradient epoch tenant session cookie header payload "
    "schema cluster node volume block sector page frame latency throughput bandwidth backlog deadline "
    "timeout retry barrier fence lock semaphore monitor scheduler allocator compiler parser lexer "
    "grammar module package library binary archive manifest registry container image"
)
CITIES = _words(
    "Paris Tokyo Lima Oslo Cairo Delhi Berlin Madrid Rome Vienna Dublin Prague Warsaw Seoul Quito "
    "Nairobi Sydney Toronto Boston Denver Austin Chicago Lisbon Athens Helsinki Zurich Geneva Milan"
)
NAMES = _words(
    "Alice Bob Carol Dave Erin Frank Grace Heidi Ivan Judy Mallory Niaj Olivia Peggy Rupert Sybil Trent Victor"
)
ITEMS = _words("apple lamp chair kettle bicycle guitar laptop camera umbrella backpack notebook pencil mirror blanket")
LANGUAGES = _words("French German Spanish Italian Dutch Polish Swedish Greek")
MEANINGS = (
    "a place that holds data for a while",
    "a part that passes requests along",
    "a record of what happened and when",
    "a limit on how long something may take",
    "a group of items handled together",
    "a way to keep two workers from clashing",
    "a copy kept on another machine",
    "a piece of a larger collection",
)
CONDITIONS = ("sunny", "cloudy", "rainy", "windy", "snowy", "foggy")


@dataclass(frozen=True)
class Case:
    """One question about one tool: the call it needs, the tool's answer and the final answer."""

    question: str
    arguments: dict[str, Any]
    result: str
    answer: dict[str, Any]


@dataclass(frozen=True)
class Domain:
    """A tool, the instructions an agent using it gets, and a drawer of questions about it."""

    name: str
    description: str
    parameters: dict[str, str]  # name -> JSON type, every one required
    instructions: str
    answer_fields: tuple[str, ...]
    draw: Callable[[random.Random], Case]


def _glossary(rng: random.Random) -> Case:
    word = rng.choice(WORDS)
    meaning = rng.choice(MEANINGS)
    question = rng.choice(
        (
            "What does '{w}' mean in the glossary?",
            "What does '{w}' mean?",
            "Look up '{w}' in the glossary.",
            "Define '{w}'.",
            "What is a '{w}'?",
            "Please tell me what '{w}' means.",
        )
    ).format(w=word)
    return Case(question, {"word": word}, f"{word}: {meaning}", {"word": word, "meaning": meaning})


def _weather(rng: random.Random) -> Case:
    city, condition, degrees = rng.choice(CITIES), rng.choice(CONDITIONS), rng.randint(-5, 35)
    question = rng.choice(
        ("What is the weather in {c}?", "How warm is it in {c} today?", "Is it raining in {c}?", "Weather for {c}?")
    ).format(c=city)
    result = json.dumps({"city": city, "condition": condition, "celsius": degrees})
    return Case(question, {"city": city}, result, {"city": city, "forecast": f"{condition}, {degrees} C"})


def _order(rng: random.Random) -> Case:
    order, status = rng.randint(100, 99999), rng.choice(("shipped", "packed", "delivered", "delayed"))
    question = rng.choice(
        ("Where is order {o}?", "What is the status of order {o}?", "Has order {o} shipped?", "Track order {o}.")
    ).format(o=order)
    return Case(question, {"order_id": order}, f"order {order}: {status}", {"order_id": order, "status": status})


def _contact(rng: random.Random) -> Case:
    name = rng.choice(NAMES)
    email = f"{name.lower()}@example.com"
    question = rng.choice(("What is {n}'s email?", "How do I reach {n}?", "Find the contact for {n}.")).format(n=name)
    return Case(question, {"name": name}, json.dumps({"name": name, "email": email}), {"name": name, "email": email})


def _price(rng: random.Random) -> Case:
    item, cents = rng.choice(ITEMS), rng.randint(100, 20000)
    price = f"{cents // 100}.{cents % 100:02d}"
    question = rng.choice(("How much is a {i}?", "What does the {i} cost?", "Price of a {i}?")).format(i=item)
    return Case(question, {"item": item}, f"{item}: {price} EUR", {"item": item, "price": f"{price} EUR"})


def _translate(rng: random.Random) -> Case:
    word, language = rng.choice(ITEMS), rng.choice(LANGUAGES)
    question = rng.choice(("How do you say '{w}' in {l}?", "Translate '{w}' into {l}.")).format(w=word, l=language)
    translated = word[::-1]
    arguments = {"text": word, "language": language}
    return Case(question, arguments, translated, {"text": word, "translation": translated})


DOMAINS = (
    Domain(
        "lookup",
        "Look a word up in the glossary.",
        {"word": "string"},
        "Look words up in the glossary, then answer with the word and its meaning.",
        ("word", "meaning"),
        _glossary,
    ),
    Domain(
        "get_weather",
        "Get the current weather of a city.",
        {"city": "string"},
        "Check the weather with the tool, then answer with the city and its forecast.",
        ("city", "forecast"),
        _weather,
    ),
    Domain(
        "track_order",
        "Look up the status of an order by its number.",
        {"order_id": "integer"},
        "Track orders with the tool, then answer with the order and its status.",
        ("order_id", "status"),
        _order,
    ),
    Domain(
        "find_contact",
        "Find a person's contact details.",
        {"name": "string"},
        "Find contacts with the tool, then answer with the name and the email.",
        ("name", "email"),
        _contact,
    ),
    Domain(
        "get_price",
        "Get the price of an item in the shop.",
        {"item": "string"},
        "Look prices up, then answer with the item and its price.",
        ("item", "price"),
        _price,
    ),
    Domain(
        "translate",
        "Translate a text into a language.",
        {"text": "string", "language": "string"},
        "Translate with the tool, then answer with the text and its translation.",
        ("text", "translation"),
        _translate,
    ),
)
GENERIC_INSTRUCTIONS = ("You are a helpful assistant.", "Use the tools to answer the user.", "")


def _schema(properties: dict[str, str], dialect: str, title: str, description: str) -> dict[str, Any]:
    """The JSON schema a framework declares for these properties (all required), in its dialect."""
    if dialect == "agents":
        props = {n: {"title": n.replace("_", " ").title(), "type": t} for n, t in properties.items()}
        return {
            "properties": props,
            "required": list(properties),
            "title": f"{title}_args",
            "type": "object",
            "additionalProperties": False,
        }
    plain = {n: {"type": t} for n, t in properties.items()}
    if dialect == "pydantic_ai":
        return {"additionalProperties": False, "properties": plain, "required": list(properties), "type": "object"}
    if dialect == "langchain":
        return {"properties": plain, "required": list(properties), "type": "object"}
    props = {n: {"title": n.replace("_", " ").title(), "type": t} for n, t in properties.items()}
    return {
        "description": description,
        "properties": props,
        "required": list(properties),
        "title": title.title().replace("_", ""),
        "type": "object",
        "additionalProperties": False,
    }


def _tool(name: str, description: str, properties: dict[str, str], dialect: str) -> Tool:
    function: dict[str, Any] = {"name": name, "description": description}
    function["parameters"] = _schema(properties, dialect, name, description)
    if dialect != "langchain":
        function["strict"] = True
    if dialect == "openai":
        function = {"name": name, "strict": True, "parameters": function["parameters"], "description": description}
    return {"type": "function", "function": function}


def _call(name: str, arguments: dict[str, Any]) -> Message:
    return {"role": "assistant", "content": "", "tool_calls": [{"name": name, "arguments": arguments}]}


@dataclass(frozen=True)
class Transcript:
    """Messages and tools, as `Tokenizer.apply_chat_template` takes them."""

    messages: list[Message]
    tools: list[Tool] | None


def _tools(rng: random.Random, domain: Domain, dialect: str, final: bool) -> list[Tool]:
    others = [d for d in DOMAINS if d is not domain]
    chosen = [domain, *rng.sample(others, rng.choice((0, 0, 1, 2)))]
    rng.shuffle(chosen)
    tools = [_tool(d.name, d.description, d.parameters, dialect) for d in chosen]
    if final:
        fields = {f: ("integer" if f == "order_id" else "string") for f in domain.answer_fields}
        tools.append(_tool(FINAL_TOOL, FINAL_TOOL_DESCRIPTION, fields, "pydantic_ai"))
    return tools


def _system(rng: random.Random, instructions: str) -> list[Message]:
    text = instructions if rng.random() < 0.7 else rng.choice(GENERIC_INSTRUCTIONS)
    return [{"role": "system", "content": text}] if text else []


def transcript(rng: random.Random) -> list[Transcript]:
    """One drawn exchange: the transcripts (one or two requests) that teach it."""
    domain = rng.choice(DOMAINS)
    case = domain.draw(rng)
    shape = rng.choice(("json", "json", "final_tool", "final_tool", "handoff", "followup"))
    dialect = {"final_tool": "pydantic_ai", "handoff": "agents", "followup": "langchain"}.get(
        shape, rng.choice(("agents", "openai", "langchain"))
    )
    tools = _tools(rng, domain, dialect, final=shape == "final_tool")
    user = {"role": "user", "content": case.question}
    called = [_call(domain.name, case.arguments), {"role": "tool", "content": case.result}]
    answer = json.dumps(case.answer)
    if shape == "final_tool":
        ending = _call(FINAL_TOOL, case.answer)
    else:
        ending = {"role": "assistant", "content": answer}
    if shape == "handoff":
        agent = domain.name.split("_")[-1]
        transfer = _tool(f"transfer_to_{agent}", f"Handoff to the {agent} agent to handle the request. ", {}, "agents")
        transfer["function"]["parameters"] = {
            "additionalProperties": False,
            "type": "object",
            "properties": {},
            "required": [],
        }
        triage = [{"role": "system", "content": f"Hand {agent} questions to the {agent} agent."}, user]
        handed = [
            _call(transfer["function"]["name"], {}),
            {"role": "tool", "content": json.dumps({"assistant": agent})},
        ]
        return [
            Transcript([*triage, handed[0]], [transfer]),
            Transcript([*_system(rng, domain.instructions), user, *handed, *called, ending], tools),
        ]
    conversation = [*_system(rng, domain.instructions), user, *called, ending]
    transcripts = [Transcript(conversation, tools)]
    if shape == "followup":
        transcripts.append(Transcript([user, *called, ending, {"role": "assistant", "content": answer}], None))
    return transcripts


def agent_transcripts(count: int, seed: int = 0) -> list[Transcript]:
    """`count` drawn exchanges' transcripts, the same for the same seed."""
    rng = random.Random(seed)
    out: list[Transcript] = []
    for _ in range(count):
        out.extend(transcript(rng))
    return out
