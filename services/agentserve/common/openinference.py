"""OpenInference semantic conventions: the span attribute names LLM tracing UIs read.

Arize Phoenix (the compose stack's tracing UI) shows a span's kind, model, token counts and
input/output only under these names (https://github.com/Arize-ai/openinference, spec
`semantic_conventions.md`); a span without `openinference.span.kind` reads as kind "unknown".
agentserve's own attributes (`turn.*`, `tool.*`, `kv.*`) stay beside them.
"""

from __future__ import annotations

SPAN_KIND = "openinference.span.kind"
LLM = "LLM"
TOOL = "TOOL"

SESSION_ID = "session.id"
INPUT_VALUE = "input.value"
INPUT_MIME_TYPE = "input.mime_type"
OUTPUT_VALUE = "output.value"
OUTPUT_MIME_TYPE = "output.mime_type"
TEXT = "text/plain"
JSON = "application/json"

LLM_MODEL_NAME = "llm.model_name"
LLM_PROVIDER = "llm.provider"
LLM_INVOCATION_PARAMETERS = "llm.invocation_parameters"  # a JSON object
LLM_PROMPT_TOKENS = "llm.token_count.prompt"
LLM_COMPLETION_TOKENS = "llm.token_count.completion"
LLM_TOTAL_TOKENS = "llm.token_count.total"
LLM_CACHED_PROMPT_TOKENS = "llm.token_count.prompt_details.cache_read"

TOOL_NAME = "tool.name"


def input_message(index: int, field: str) -> str:
    """`llm.input_messages.<i>.message.<field>` (role, content): the UI renders these as a chat."""
    return f"llm.input_messages.{index}.message.{field}"


def output_message(index: int, field: str) -> str:
    return f"llm.output_messages.{index}.message.{field}"


# Span attributes travel in every export and sit in the UI's database: a long prompt or tool
# answer is cut, and says so, rather than shipped whole.
MAX_TEXT_CHARS = 8192


def bounded(text: str, limit: int = MAX_TEXT_CHARS) -> str:
    """`text`, or its first `limit` characters and a note of how many were cut."""
    if len(text) <= limit:
        return text
    return f"{text[:limit]}… [{len(text) - limit} more characters not recorded]"
