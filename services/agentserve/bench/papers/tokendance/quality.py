"""TokenDance quality: how position-independent reuse changes the trained default model's
next-token distributions against a full recompute, per recompute fraction (issue 16, item 4).

The prompt set is all-gather shaped, from held-out corpus text the model never trained on:
`agents` agents over `rounds` rounds. Each agent has a private history; each round gathers every
agent's output (a shared block) and gives every agent a prompt of its history, that round's
blocks in an agent-specific order (rotated by the agent's index, so each block sits at a
different position in each prompt), and a private question of `tail_tokens`. Every position of
the question is scored: the next-token distribution with reused shared blocks against the full
recompute's, as top-1 agreement and mean KL(full || reuse) in nats.

Each round's first prompt leads: it is computed in full and gives the round its masters
(`CollectiveReuse.prefill_round`); exact by construction, it is not scored. Each fraction runs
`CollectiveReuse` with no fallback. With the deviation threshold a request
whose estimate passes it is recomputed in full, which gives exactly the full recompute's logits
(`tests/unit/engine/test_shared_context.py`); the `with_fallback` figures score those requests
as such.
"""

from __future__ import annotations

import argparse
import json
from dataclasses import asdict, dataclass

import torch

from agentserve.contracts.segments import (
    DEFAULT_RECOMPUTE_FRACTION,
    PrivateSegment,
    ReusePolicy,
    SegmentedPrompt,
    SharedBlock,
)
from agentserve.engine.default_model import ensure_default_model
from agentserve.engine.loader import load_model
from agentserve.engine.model import CausalLM
from agentserve.engine.recompute_selection import DEFAULT_MAX_DEVIATION
from agentserve.engine.reuse_quality import distribution_gap
from agentserve.engine.shared_context import CollectiveReuse
from agentserve.model_files.tokenizer import Tokenizer
from agentserve.training.corpus import split_corpus, token_stream

FRACTIONS = (0.0, 0.05, 0.1, 0.15, 0.2, 0.3, 0.5, 1.0)


@dataclass(frozen=True)
class PromptSet:
    agents: int = 8
    rounds: int = 3
    history_tokens: int = 96
    block_tokens: int = 32
    tail_tokens: int = 16

    def __post_init__(self) -> None:
        for name in ("agents", "rounds", "history_tokens", "block_tokens", "tail_tokens"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be >= 1, got {getattr(self, name)}")

    def build(self, stream: list[int]) -> list[list[tuple[PrivateSegment, tuple[SharedBlock, ...], PrivateSegment]]]:
        """Per round, per agent: (history, gathered blocks in the agent's order, question), cut
        from `stream` in order; raises if it is too short."""
        needed = self.agents * (self.history_tokens + self.rounds * (self.block_tokens + self.tail_tokens))
        if len(stream) < needed:
            raise ValueError(f"the prompt set needs {needed} tokens of text, the stream has {len(stream)}")
        at = 0

        def take(n: int) -> tuple[int, ...]:
            nonlocal at
            at += n
            return tuple(stream[at - n : at])

        histories = [PrivateSegment(take(self.history_tokens)) for _ in range(self.agents)]
        rounds = []
        for r in range(self.rounds):
            blocks = [SharedBlock(f"r{r}-agent{a}", r, take(self.block_tokens)) for a in range(self.agents)]
            questions = [PrivateSegment(take(self.tail_tokens)) for _ in range(self.agents)]
            rounds.append(
                [
                    (histories[a], tuple(blocks[(a + i) % self.agents] for i in range(self.agents)), questions[a])
                    for a in range(self.agents)
                ]
            )
        return rounds


@dataclass(frozen=True)
class FractionQuality:
    recompute_fraction: float
    top1_agreement: float
    mean_kl: float
    recomputed_share: float  # of the shared tokens, recomputed
    mean_deviation: float  # the per-request estimate
    p90_deviation: float
    # Spearman rank correlation of the per-request estimate with the request's mean KL: how well
    # the estimate the fallback reads orders requests by their real deviation (None when either
    # is constant, as at fraction 1).
    deviation_kl_rank_correlation: float | None
    fallback_rate: float  # requests past max_deviation
    top1_agreement_with_fallback: float
    mean_kl_with_fallback: float


def measure(
    model: CausalLM,
    rounds: list,
    fraction: float,
    tail_tokens: int,
    max_deviation: float,
    reference: dict[tuple[int, ...], torch.Tensor] | None = None,
) -> FractionQuality:
    """One point of the curve. `reference` caches the full recompute's logits by prompt tokens
    (they do not depend on the fraction)."""
    reuse = CollectiveReuse(model, max_deviation=None, tail_logits=tail_tokens)
    policy = ReusePolicy(recompute_fraction=fraction)
    reference = {} if reference is None else reference
    agree, kl, agree_fb, kl_fb = [], [], [], []
    shared = recomputed = fallbacks = 0
    deviations: list[float] = []
    request_kl: list[float] = []
    for round_prompts in rounds:
        prompts = [SegmentedPrompt((h, *blocks, q), policy) for h, blocks, q in round_prompts]
        for prompt, prefill in zip(prompts, reuse.prefill_round(prompts).prefills, strict=True):
            if prefill.stats.led:
                continue  # computed in full to give the round its masters: exact by construction, not scored
            key = tuple(prompt.token_ids)
            if key not in reference:
                reference[key] = reuse.full(prompt.token_ids)[0]
            gap = distribution_gap(reference[key], prefill.logits)
            agree.append(gap.top1_agree)
            kl.append(gap.kl)
            fell_back = not prefill.stats.exact and prefill.stats.deviation > max_deviation
            fallbacks += fell_back
            agree_fb.append(torch.ones_like(gap.top1_agree) if fell_back else gap.top1_agree)
            kl_fb.append(torch.zeros_like(gap.kl) if fell_back else gap.kl)
            shared += prefill.stats.shared_tokens
            recomputed += prefill.stats.recomputed_shared_tokens
            deviations.append(prefill.stats.deviation)
            request_kl.append(gap.kl.mean().item())
    n = len(deviations)
    return FractionQuality(
        recompute_fraction=fraction,
        top1_agreement=round(torch.cat(agree).double().mean().item(), 4),
        mean_kl=round(torch.cat(kl).mean().item(), 5),
        recomputed_share=round(recomputed / shared, 4),
        mean_deviation=round(sum(deviations) / n, 4),
        p90_deviation=round(sorted(deviations)[int(0.9 * (n - 1))], 4),
        deviation_kl_rank_correlation=_rank_correlation(deviations, request_kl),
        fallback_rate=round(fallbacks / n, 4),
        top1_agreement_with_fallback=round(torch.cat(agree_fb).double().mean().item(), 4),
        mean_kl_with_fallback=round(torch.cat(kl_fb).mean().item(), 5),
    )


def _rank_correlation(a: list[float], b: list[float]) -> float | None:
    if len(set(a)) < 2 or len(set(b)) < 2:
        return None
    ranks = [torch.tensor(x, dtype=torch.float64).argsort().argsort().double() for x in (a, b)]
    centered = [r - r.mean() for r in ranks]
    return round((centered[0] @ centered[1]).item() / (centered[0].norm() * centered[1].norm()).item(), 3)


def run(
    prompt_set: PromptSet = PromptSet(),
    fractions: tuple[float, ...] = FRACTIONS,
    max_deviation: float = DEFAULT_MAX_DEVIATION,
    num_threads: int = 1,
) -> dict:
    """The quality curve over `fractions` (the default fraction always included) as a JSON-able
    dict. One torch thread by default: these are quality figures, not speed, and on a shared
    machine two threads per process contend, which makes a run many times slower."""
    torch.set_num_threads(num_threads)
    model_dir = ensure_default_model()
    model, fingerprint = load_model(model_dir, "fp32")
    stream = token_stream(Tokenizer.from_dir(model_dir), split_corpus().held_out)
    rounds = prompt_set.build(stream)
    fractions = tuple(sorted({*fractions, DEFAULT_RECOMPUTE_FRACTION}))
    reference: dict[tuple[int, ...], torch.Tensor] = {}
    curve = [measure(model, rounds, f, prompt_set.tail_tokens, max_deviation, reference) for f in fractions]
    default = next(q for q in curve if q.recompute_fraction == DEFAULT_RECOMPUTE_FRACTION)
    return {
        "model_fingerprint": fingerprint,
        "prompt_set": asdict(prompt_set),
        "scored_positions_per_fraction": (prompt_set.agents - 1) * prompt_set.rounds * prompt_set.tail_tokens,
        "default_recompute_fraction": DEFAULT_RECOMPUTE_FRACTION,
        "max_deviation": max_deviation,
        "top1_agreement": default.top1_agreement,
        "mean_kl": default.mean_kl,
        "curve": [asdict(q) for q in curve],
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--agents", type=int, default=PromptSet.agents)
    parser.add_argument("--rounds", type=int, default=PromptSet.rounds)
    parser.add_argument("--max-deviation", type=float, default=DEFAULT_MAX_DEVIATION)
    args = parser.parse_args()
    print(json.dumps(run(PromptSet(args.agents, args.rounds), max_deviation=args.max_deviation), indent=2))


if __name__ == "__main__":
    main()
