"""The sampler: greedy, or seeded temperature + top-p (the parameters are `agentserve.contracts.SamplingParams`)."""

from __future__ import annotations

import torch

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
