"""The default model's special tokens, chat template, architecture presets and which presets ship trained."""

from __future__ import annotations

from dataclasses import dataclass

BOS, EOS, PAD, IM_START, IM_END = "<|bos|>", "<|eos|>", "<|pad|>", "<|im_start|>", "<|im_end|>"
# Trained first, so they get ids 0..4 in this order.
SPECIAL_TOKENS = (BOS, EOS, PAD, IM_START, IM_END)
BOS_ID, EOS_ID, PAD_ID, IM_START_ID, IM_END_ID = range(len(SPECIAL_TOKENS))
# Generation stops at either: <|eos|> ends a plain completion, <|im_end|> ends a chat turn.
STOP_IDS = [EOS_ID, IM_END_ID]

# ChatML, with tool calling in the Hermes / Qwen2.5 convention (the format `scheduler.tool_calls`
# parses): `tools` are listed as JSON inside <tools></tools> in the system turn; an assistant turn
# that called tools carries one `<tool_call>\n{"name": ..., "arguments": {...}}\n</tool_call>` per
# call (`arguments` must be a mapping here; the gateway decodes OpenAI's JSON string); consecutive
# `tool` results share one user turn, each in <tool_response></tool_response>. Non-string content
# is rejected in the template itself so HF and our wrapper fail alike.
TOOLS_PREAMBLE = (
    "# Tools\n\nYou may call one or more functions to assist with the user query.\n\n"
    "You are provided with function signatures within <tools></tools> XML tags:\n<tools>"
)
TOOLS_INSTRUCTIONS = (
    "\n</tools>\n\nFor each function call, return a json object with function name and arguments "
    "within <tool_call></tool_call> XML tags:\n<tool_call>\n"
    '{"name": <function-name>, "arguments": <args-json-object>}\n</tool_call>'
)
CHAT_TEMPLATE = (
    "{% for message in messages %}"
    "{% if message['content'] is not string %}"
    "{{ raise_exception('message content must be a string') }}"
    "{% endif %}"
    "{% endfor %}"
    "{% set system_first = messages and messages[0]['role'] == 'system' %}"
    "{% if tools %}"
    # The two constants are spliced in as jinja string literals (repr quotes and escapes them).
    "{{ '<|im_start|>system\\n' }}"
    "{% if system_first %}{{ messages[0]['content'] + '\\n\\n' }}{% endif %}"
    "{{ " + repr(TOOLS_PREAMBLE) + " }}"
    "{% for tool in tools %}{{ '\\n' + (tool | tojson) }}{% endfor %}"
    "{{ " + repr(TOOLS_INSTRUCTIONS) + " + '<|im_end|>\\n' }}"
    "{% endif %}"
    "{% for message in messages %}"
    "{% if loop.first and system_first and tools %}"
    "{% elif message['role'] == 'tool' %}"
    "{% if loop.first or messages[loop.index0 - 1]['role'] != 'tool' %}{{ '<|im_start|>user' }}{% endif %}"
    "{{ '\\n<tool_response>\\n' + message['content'] + '\\n</tool_response>' }}"
    "{% if loop.last or messages[loop.index0 + 1]['role'] != 'tool' %}{{ '<|im_end|>\\n' }}{% endif %}"
    "{% elif message['role'] == 'assistant' and message['tool_calls'] %}"
    "{{ '<|im_start|>assistant' }}"
    "{% if message['content'] %}{{ '\\n' + message['content'] }}{% endif %}"
    "{% for call in message['tool_calls'] %}"
    "{% set call = call['function'] if call['function'] is defined else call %}"
    "{{ '\\n<tool_call>\\n{\"name\": ' + (call['name'] | tojson) + ', \"arguments\": ' }}"
    "{{ (call['arguments'] | tojson) + '}\\n</tool_call>' }}"
    "{% endfor %}"
    "{{ '<|im_end|>\\n' }}"
    "{% else %}"
    "{{ '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>\\n' }}"
    "{% endif %}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}"
)


@dataclass(frozen=True)
class ModelPreset:
    vocab_size: int
    hidden_size: int
    intermediate_size: int
    num_hidden_layers: int
    num_attention_heads: int
    num_key_value_heads: int
    head_dim: int
    tie_word_embeddings: bool
    rope_theta: float = 500000.0
    max_position_embeddings: int = 32768
    rms_norm_eps: float = 1e-5

    def __post_init__(self) -> None:
        for name in (
            "vocab_size",
            "hidden_size",
            "intermediate_size",
            "num_hidden_layers",
            "num_attention_heads",
            "num_key_value_heads",
            "head_dim",
            "max_position_embeddings",
        ):
            value = getattr(self, name)
            if not isinstance(value, int) or value <= 0:
                raise ValueError(f"preset {name} must be a positive integer, got {value!r}")
        if self.num_attention_heads % self.num_key_value_heads:
            raise ValueError(
                f"num_attention_heads ({self.num_attention_heads}) must be a multiple of "
                f"num_key_value_heads ({self.num_key_value_heads})"
            )
        # Byte-level BPE needs all 256 byte tokens plus the specials before any merge.
        if self.vocab_size < 256 + len(SPECIAL_TOKENS):
            raise ValueError(f"vocab_size must be at least {256 + len(SPECIAL_TOKENS)}, got {self.vocab_size}")


PRESETS: dict[str, ModelPreset] = {
    "tiny": ModelPreset(
        vocab_size=8192,
        hidden_size=256,
        intermediate_size=704,
        num_hidden_layers=4,
        num_attention_heads=4,
        num_key_value_heads=2,
        head_dim=64,
        tie_word_embeddings=True,
    ),
    "small": ModelPreset(
        vocab_size=16384,
        hidden_size=512,
        intermediate_size=1408,
        num_hidden_layers=8,
        num_attention_heads=8,
        num_key_value_heads=4,
        head_dim=64,
        tie_word_embeddings=False,
    ),
}


# Presets with trained weights shipped in `model_files/data` (fp16, Hugging Face parameter names),
# written by `agentserve model train`; the others exist as random weights only.
TRAINED_WEIGHTS = {"tiny": "tiny-trained.fp16.safetensors"}
# The mixtral (mixture-of-experts) variants with trained weights (`agentserve model train --model-type mixtral`).
TRAINED_MOE_WEIGHTS = {"tiny": "tiny-mixtral-trained.fp16.safetensors"}
# The llama presets with agent weights: the trained ones trained further on the corpus and generated
# agent transcripts (`agentserve model train --init-from trained --agent-transcripts N`), so the
# model calls the tool a question needs and then gives the final answer (`training.agent_transcripts`).
AGENT_WEIGHTS = {"tiny": "tiny-agent.fp16.safetensors"}


def get_preset(name: str) -> ModelPreset:
    try:
        return PRESETS[name]
    except KeyError:
        raise ValueError(f"unknown preset {name!r}; choose one of {', '.join(PRESETS)}") from None
