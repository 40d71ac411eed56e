"""Sampling parameters of one request: what every layer from the HTTP gateway to the engine agrees on.

The sampler itself (torch) lives in `agentserve.engine.sampling`.
"""

from __future__ import annotations

from dataclasses import dataclass

from agentserve.contracts.structured import StructuredOutput

# Upper bound on max_tokens a single request may ask for; the engine also bounds it by the
# model's context length. Keeps a typo like 10**9 from reserving the whole KV pool.
MAX_TOKENS_LIMIT = 1 << 20
# Alternatives per token a request may ask logprobs for (OpenAI's top_logprobs bound).
MAX_LOGPROBS = 20


@dataclass(frozen=True)
class SamplingParams:
    max_tokens: int = 64
    temperature: float = 0.0  # 0 = greedy
    top_p: float = 1.0
    seed: int | None = None
    stop_token_ids: tuple[int, ...] = ()  # applied by the scheduler to the stream; not sent to engines
    ignore_eos: bool = False
    min_tokens: int = 0  # no EOS (nor stop id or stop string) before this many output tokens
    # Log-probabilities of each sampled token plus this many top alternatives (0: the token's
    # only); None: none. The engine computes them from the model's distribution.
    logprobs: int | None = None
    stop: tuple[str, ...] = ()  # stop strings, applied by the scheduler to the text; not sent to engines
    structured: StructuredOutput | None = None  # decode under this grammar (JSON, tool calls)

    def __post_init__(self) -> None:
        if not isinstance(self.max_tokens, int) or isinstance(self.max_tokens, bool):
            raise ValueError(f"max_tokens must be an integer, got {self.max_tokens!r}")
        if self.max_tokens <= 0:
            raise ValueError(f"max_tokens must be positive, got {self.max_tokens}")
        if self.max_tokens > MAX_TOKENS_LIMIT:
            raise ValueError(f"max_tokens {self.max_tokens} exceeds the limit {MAX_TOKENS_LIMIT}")
        if not 0.0 <= self.temperature <= 100.0:
            raise ValueError(f"temperature must be in [0, 100], got {self.temperature}")
        if not 0.0 < self.top_p <= 1.0:
            raise ValueError(f"top_p must be in (0, 1], got {self.top_p}")
        if not 0 <= self.min_tokens <= self.max_tokens:
            raise ValueError(f"min_tokens must be in [0, max_tokens={self.max_tokens}], got {self.min_tokens}")
        if self.logprobs is not None and not 0 <= self.logprobs <= MAX_LOGPROBS:
            raise ValueError(f"logprobs must be in [0, {MAX_LOGPROBS}], got {self.logprobs}")
        if any(not s for s in self.stop):
            raise ValueError("stop strings must not be empty")
        if self.structured is not None and self.ignore_eos:
            # The grammar ends the output (EOS is all it allows once complete); ignoring EOS would
            # leave the sequence with no token it may sample.
            raise ValueError("ignore_eos cannot be combined with structured output: the grammar decides the end")
        if self.structured is not None and self.min_tokens:
            # Once the grammar is complete EOS is all it allows: holding EOS back would leave nothing.
            raise ValueError("min_tokens cannot be combined with structured output: the grammar decides the end")

    @property
    def greedy(self) -> bool:
        return self.temperature == 0.0
