"""The `turn` span, readable as one LLM call in an LLM tracing UI (OpenInference conventions).

A turn span carries span kind LLM, the served model name, the sampling parameters, the turn's
new message as input and the generated text as output, and the token counts: prompt (the whole
prompt, history included, as the engines process it), completion, total, and prompt tokens read
from cache. `session.id` groups a session's turns (Phoenix's Sessions view), and tool calls made
after a turn are children of its span (the SDK sends the turn's `traceparent` to the tool proxy).
The scheduler's own `turn.*` attributes (engines, KV path, store hits) stay beside them.

`input.value` is the turn's new message only: the history is the earlier turns' inputs and outputs,
and repeating it in every span would grow each trace with the session. `output.value` is the text
of the generated tokens as the session's history keeps them: a stop string that ended the text
sent to the client is part of it.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Sequence

from opentelemetry.trace import Span

from agentserve.common import openinference as oi
from agentserve.common.telemetry import tracer
from agentserve.contracts import SamplingParams
from agentserve.model_files.tokenizer import Tokenizer
from agentserve.scheduler.sessions import Session

PROVIDER = "agentserve"


class TurnSpans:
    """Opens a turn's span with what is known at its start and completes it when the turn ends."""

    def __init__(self, tokenizer: Tokenizer, model_name: str) -> None:
        self.tokenizer = tokenizer
        self.model_name = model_name

    def start(
        self,
        session: Session,
        prompt_tokens: int,
        sampling: SamplingParams,
        role: str,
        message: str | None,
        token_ids: Sequence[int] | None,
    ) -> Span:
        text = oi.bounded(message if message is not None else self.tokenizer.decode(token_ids or []))
        parameters = json.dumps(dataclasses.asdict(sampling), default=str)
        return tracer().start_span(
            "turn",
            attributes={
                oi.SPAN_KIND: oi.LLM,
                oi.SESSION_ID: session.session_id,
                oi.LLM_MODEL_NAME: self.model_name,
                oi.LLM_PROVIDER: PROVIDER,
                oi.LLM_INVOCATION_PARAMETERS: oi.bounded(parameters),
                oi.LLM_PROMPT_TOKENS: prompt_tokens,
                oi.INPUT_VALUE: text,
                oi.INPUT_MIME_TYPE: oi.TEXT,
                oi.input_message(0, "role"): role,
                oi.input_message(0, "content"): text,
                "turn.index": session.turns,
                "turn.prompt_tokens": prompt_tokens,
            },
        )

    @staticmethod
    def prefilled(span: Span, cached_tokens: int) -> None:
        """The prefill engine answered: this many prompt tokens came from cache, not compute."""
        span.set_attribute(oi.LLM_CACHED_PROMPT_TOKENS, cached_tokens)

    def end(self, span: Span, prompt_tokens: int, output: Sequence[int]) -> None:
        """The output so far (all of it, or what came before a failure) and the counts; ends the span.
        At most once: a turn ends at its final event or when it fails."""
        if not span.is_recording():
            return
        text = oi.bounded(self.tokenizer.decode(output))
        span.set_attributes(
            {
                oi.LLM_COMPLETION_TOKENS: len(output),
                oi.LLM_TOTAL_TOKENS: prompt_tokens + len(output),
                oi.OUTPUT_VALUE: text,
                oi.OUTPUT_MIME_TYPE: oi.TEXT,
                oi.output_message(0, "role"): "assistant",
                oi.output_message(0, "content"): text,
                "turn.completion_tokens": len(output),
            }
        )
        span.end()
