"""Which token a drafted position gets: the draft's when the target agrees, else the target's own.

Greedy: the target's argmax; the draft is accepted when it is that token, so the output is the
one a plain decode gives, token for token.

Sampling: standard speculative rejection sampling (Leviathan et al., Chen et al.). With `p` the
target's distribution at the position (`sampling.distribution`, after temperature and top-p) and
`q` the one the draft token `d` was drawn from, `d` is kept with probability `min(1, p(d) / q(d))`;
otherwise the token is drawn from `max(0, p - q)` renormalised. The kept-or-redrawn token is then
distributed exactly as `p`: P(x) = q(x) min(1, p(x)/q(x)) + (1 - sum_y min(p(y), q(y))) *
max(0, p(x) - q(x)) / sum_y max(0, p(y) - q(y)) = min(p, q)(x) + max(0, p - q)(x) = p(x).
A prompt-lookup draft is deterministic: `q` is one-hot at `d`, so `d` is kept with probability
`p(d)` and a rejection draws from `p` with `d` removed.
"""

from __future__ import annotations

import torch

from agentserve.contracts.sampling import SamplingParams
from agentserve.engine.sampling import distribution


def verify_token(
    logits: torch.Tensor,
    draft_token: int,
    draft_probs: torch.Tensor | None,
    params: SamplingParams,
    generator: torch.Generator | None,
) -> tuple[int, bool]:
    """The token for a drafted position from the target's (shaped) `[vocab]` logits there, and
    whether it is the draft's. `draft_probs`: the draft's distribution `q`, None for a
    deterministic draft (one-hot)."""
    if params.greedy:
        token = int(torch.argmax(logits))
        return token, token == draft_token
    p = distribution(logits, params)
    q_of_draft = 1.0 if draft_probs is None else float(draft_probs[draft_token])
    # u < p/q, written without the division (q may be 0 for a token top-p dropped from q).
    if float(torch.rand((), generator=generator)) * q_of_draft < float(p[draft_token]):
        return draft_token, True
    if draft_probs is None:
        residual = p.clone()
        residual[draft_token] = 0.0
    else:
        residual = torch.clamp(p - draft_probs, min=0.0)
    total = float(residual.sum())
    if total <= 0.0:  # p <= q everywhere means p == q, where a rejection has probability 0
        residual, total = p, 1.0
    return int(torch.multinomial(residual / total, 1, generator=generator)), False
