"""Tools for a chat template that does not render them (SmolLM2's): written into the messages in the
documented format, exactly the text the default model's tool-aware template renders."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from tokenizers import Tokenizer as BackendTokenizer

from agentserve.model_files.presets import CHAT_TEMPLATE, TOOLS_INSTRUCTIONS, TOOLS_PREAMBLE
from agentserve.model_files.tokenizer import Tokenizer
from agentserve.model_files.tools_prompt import renders_tools, with_tools_prompt

pytestmark = pytest.mark.unit

# SmolLM2-135M-Instruct's tokenizer.chat_template, as its GGUF file holds it: ChatML without tools.
SMOLLM2_TEMPLATE = (
    "{% for message in messages %}{% if loop.first and messages[0]['role'] != 'system' %}"
    "{{ '<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by Hugging Face<|im_end|>\n' }}"
    "{% endif %}{{'<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>' + '\n'}}"
    "{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}"
)
TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "lookup",
            "description": "Look a word up — in the glossary.",
            "parameters": {"type": "object", "properties": {"word": {"type": "string"}}, "required": ["word"]},
        },
    }
]
CALL = {"id": "call_1", "type": "function", "function": {"name": "lookup", "arguments": {"word": "cache"}}}
EXCHANGE = [
    {"role": "user", "content": "What is a cache?"},
    {"role": "assistant", "content": "", "tool_calls": [CALL]},
    {"role": "tool", "tool_call_id": "call_1", "content": "cache: a fast store"},
    {"role": "tool", "tool_call_id": "call_2", "content": "store: keeps things"},
    {"role": "assistant", "content": "Let me check.", "tool_calls": [CALL, CALL]},
    {"role": "tool", "tool_call_id": "call_3", "content": "again"},
    {"role": "user", "content": "Thanks."},
]


def _tokenizer(model_dir: Path, template: str) -> Tokenizer:
    backend = BackendTokenizer.from_file(str(model_dir / "tokenizer.json"))
    return Tokenizer(backend, chat_template=template)


def test_which_templates_render_tools():
    assert renders_tools(CHAT_TEMPLATE)
    assert not renders_tools(SMOLLM2_TEMPLATE)
    assert renders_tools("{% for t in tools %}{% if t %}{% break %}{% endif %}{% endfor %}")


@pytest.mark.parametrize("system", [[], [{"role": "system", "content": "You are terse."}]], ids=["no-system", "system"])
def test_a_template_without_tools_renders_what_the_tool_aware_template_renders(tiny_model_dir, system):
    messages = [*system, *EXCHANGE]
    smollm2 = _tokenizer(tiny_model_dir, SMOLLM2_TEMPLATE).apply_chat_template(messages, tools=TOOLS)
    tool_aware = _tokenizer(tiny_model_dir, CHAT_TEMPLATE).apply_chat_template(messages, tools=TOOLS)
    assert smollm2 == tool_aware
    assert "You are a helpful AI assistant named SmolLM" not in smollm2


def test_the_written_messages_exactly():
    listing = TOOLS_PREAMBLE + "\n" + json.dumps(TOOLS[0], ensure_ascii=False) + TOOLS_INSTRUCTIONS
    block = '<tool_call>\n{"name": "lookup", "arguments": {"word": "cache"}}\n</tool_call>'
    assert with_tools_prompt([{"role": "system", "content": "Be brief."}, *EXCHANGE], TOOLS) == [
        {"role": "system", "content": "Be brief.\n\n" + listing},
        {"role": "user", "content": "What is a cache?"},
        {"role": "assistant", "content": block},
        {
            "role": "user",
            "content": "<tool_response>\ncache: a fast store\n</tool_response>\n"
            "<tool_response>\nstore: keeps things\n</tool_response>",
        },
        {"role": "assistant", "content": f"Let me check.\n{block}\n{block}"},
        {"role": "user", "content": "<tool_response>\nagain\n</tool_response>"},
        {"role": "user", "content": "Thanks."},
    ]


def test_without_tools_or_tool_messages_the_template_renders_the_messages_as_given(tiny_model_dir):
    messages = [{"role": "user", "content": "hi"}]
    rendered = _tokenizer(tiny_model_dir, SMOLLM2_TEMPLATE).apply_chat_template(messages, tools=[])
    assert rendered == (
        "<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by Hugging Face<|im_end|>\n"
        "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n"
    )
