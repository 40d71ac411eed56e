"""SmolLM2-135M-Instruct (the model `up` serves by default) under the tool-call grammars, greedy: a
reply that calls a tool ends after the call when the model would go on with text.

After `</tool_call>` SmolLM2 puts most of its probability on a newline, the start of a sentence it
would write next. The grammar allows that newline only as the separator before another call, so
masked decoding alone turned it into a second call, and a third, until max_tokens (one `lookup` call
came back eight times). The grammar may end after that newline, and where it may end, EOS takes the
probability of the tokens it refuses (`agentserve.engine.grammar`): the reply is the one call.

The constraints are built as the gateway builds them (`parse_chat_request`), the prompt as it
renders it (the tools prompt written into SmolLM2's ChatML template)."""

from __future__ import annotations

import pytest

from agentserve.engine.engine import LLMEngine
from agentserve.engine.engine_config import EngineConfig
from agentserve.engine.model_catalog import SMOLLM2, resolve_model
from agentserve.model_files.gguf_folder import model_folder
from agentserve.model_files.tokenizer import Tokenizer
from agentserve.scheduler.http.schemas import parse_chat_request
from agentserve.scheduler.tool_calls import parse_tool_calls

pytestmark = pytest.mark.unit

MESSAGES = [
    {"role": "system", "content": "Look words up in the glossary, then answer with the word and its meaning."},
    {"role": "user", "content": "What does 'cache' mean in the glossary?"},
]
WORD = {
    "type": "object",
    "properties": {"word": {"type": "string"}},
    "required": ["word"],
    "additionalProperties": False,
}
ANSWER = {
    "type": "object",
    "properties": {"word": {"type": "string"}, "meaning": {"type": "string"}},
    "required": ["word", "meaning"],
    "additionalProperties": False,
}
ANSWER_FORMAT = {"name": "Answer", "schema": ANSWER, "strict": True}
LOOKUP = {"type": "function", "function": {"name": "lookup", "parameters": WORD, "strict": True}}
FINAL_RESULT = {"type": "function", "function": {"name": "final_result", "parameters": ANSWER, "strict": True}}
MAX_TOKENS = 200  # room for several calls: the reply must end after one by itself


@pytest.fixture(scope="module")
def smollm2() -> tuple[LLMEngine, Tokenizer]:
    model_dir = model_folder(resolve_model(SMOLLM2).source)
    return LLMEngine.from_dir(model_dir, EngineConfig(prefix_cache=False)), Tokenizer.from_dir(model_dir)


@pytest.mark.parametrize(
    "request_fields",
    [
        # The openai client's `parse` helper and the OpenAI Agents SDK: a strict tool beside a
        # response_format under "auto" (the JSON answer or calls instead).
        {"tools": [LOOKUP], "response_format": {"type": "json_schema", "json_schema": ANSWER_FORMAT}},
        # pydantic-ai: "required" over the tool and its final_result output tool.
        {"tools": [LOOKUP, FINAL_RESULT], "tool_choice": "required"},
    ],
    ids=["json-or-calls", "required"],
)
def test_a_reply_that_calls_a_tool_ends_after_the_call(smollm2, request_fields):
    engine, tokenizer = smollm2
    body = {"messages": MESSAGES, "temperature": 0, "max_tokens": MAX_TOKENS, **request_fields}
    sampling = parse_chat_request(body).sampling
    prompt = tokenizer.encode(tokenizer.apply_chat_template(MESSAGES, tools=body["tools"]))
    seq = engine.generate(prompt, sampling)
    text = tokenizer.decode(seq.output_token_ids, skip_special_tokens=True)
    assert seq.finish_reason == "stop", text
    parsed = parse_tool_calls(text, drop_open_block=True)
    assert parsed.content is None, text
    assert [call.name for call in parsed.tool_calls] == ["lookup"], text
