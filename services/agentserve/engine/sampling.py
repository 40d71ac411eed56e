"""The sampler: greedy, or seeded temperature + top-p (the parameters are `agentserve.contracts.SamplingParams`),
with what shapes or reports a step: stop tokens held off until `min_tokens`, and logprobs."""

from __future__ import annotations

from collections.abc import Collection

import torch

from agentserve.contracts import TokenLogprob
from agentserve.contracts.sampling import SamplingParams


def make_generator(params: SamplingParams) -> torch.Generator | None:
    """The request's random stream: None for greedy, seeded when the request names a seed."""
    if params.greedy:
        return None
    gen = torch.Generator()
    if params.seed is None:
        gen.seed()
    else:
        gen.manual_seed(params.seed)
    return gen


def sample(logits: torch.Tensor, params: SamplingParams, generator: torch.Generator | None) -> int:
    """Pick one token from a `[vocab]` logits row."""
    if params.greedy:
        return int(torch.argmax(logits))
    probs = torch.softmax(logits.float() / params.temperature, dim=-1)
    if params.top_p < 1.0:
        sorted_probs, order = torch.sort(probs, descending=True)
        # Keep the smallest prefix whose mass reaches top_p (always at least the top token).
        keep = torch.cumsum(sorted_probs, dim=-1) - sorted_probs < params.top_p
        sorted_probs = sorted_probs * keep
        choice = torch.multinomial(sorted_probs / sorted_probs.sum(), 1, generator=generator)
        return int(order[choice])
    return int(torch.multinomial(probs, 1, generator=generator))


def distribution(logits: torch.Tensor, params: SamplingParams) -> torch.Tensor:
    """The probabilities `sample` draws from for a `[vocab]` logits row, in vocab order (float32):
    temperature, then top-p's kept prefix renormalised; greedy is one-hot at the argmax. Speculative
    verification (`engine.speculative.acceptance`) needs the whole distribution, not one draw."""
    if params.greedy:
        return torch.nn.functional.one_hot(torch.argmax(logits), logits.shape[-1]).float()
    probs = torch.softmax(logits.float() / params.temperature, dim=-1)
    if params.top_p < 1.0:
        sorted_probs, order = torch.sort(probs, descending=True)
        keep = torch.cumsum(sorted_probs, dim=-1) - sorted_probs < params.top_p
        kept = torch.zeros_like(probs).scatter_(-1, order, sorted_probs * keep)
        return kept / kept.sum()
    return probs


def suppress(logits: torch.Tensor, token_ids: Collection[int]) -> torch.Tensor:
    """`logits` with `token_ids` made impossible (a copy; the caller's row is left as it was)."""
    if not token_ids:
        return logits
    out = logits.clone()
    out[list(token_ids)] = float("-inf")
    return out


def token_logprob(logits: torch.Tensor, token: int, top: int) -> TokenLogprob:
    """`token`'s log-probability under the model's distribution and the `top` likeliest tokens.

    Taken from the raw logits (before temperature, top-p and min_tokens), as vLLM's default
    `raw_logprobs`: what the model believes, whatever the request's sampling made of it.
    """
    logprobs = torch.log_softmax(logits.float(), dim=-1)
    best: tuple[tuple[int, float], ...] = ()
    if top:
        values, ids = torch.topk(logprobs, top)
        best = tuple(zip(ids.tolist(), values.tolist()))
    return TokenLogprob(token, float(logprobs[token]), best)
