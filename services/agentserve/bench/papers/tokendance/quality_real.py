"""TokenDance quality on a real model at the workloads' prompt lengths: SmolLM2-135M-Instruct (the
served default, `engine.model_catalog`, 8K context), all-gather rounds of 1K-4K-token prompts,
top-1 agreement and KL(full || reuse) against full recompute per recompute fraction.

A round, per prompt length L and workload shape: `blocks` gathered messages of `block_tokens`
each (GenerativeAgents-shaped: 4 of 128 tokens; AgentSociety-shaped: 8 of 64), held by `agents`
agents' prompts, each its private history (L less the blocks and the question), the blocks in an
order of its own (rotated by the agent's index) and a private question of `tail_tokens`, every
position of which is scored. Text is the project's corpus (`training.corpus`, which SmolLM2 was
not trained on), tokenized by SmolLM2's tokenizer, cut in order so no two pieces repeat.

Each agent's history is a prefix-cache hit (its KV computed once, exactly, and given to both
sides as `PrefixKV`): only the blocks and the question run, as in a served round. The round's
first agent leads (computed in full, it gives the masters; exact, not scored); every other
agent's prompt is blended against those masters at each fraction, with no fallback, and compared
with its full recompute over the same history. The default fraction is the smallest measured
whose top-1 agreement meets `TOP1_FLOOR` in every (shape, length) cell (`chosen_fraction`).
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Callable
from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING

import torch

from agentserve.contracts.segments import PrivateSegment, ReusePolicy, Segment, SegmentedPrompt, SharedBlock
from agentserve.engine.reuse_quality import distribution_gap
from agentserve.engine.shared_context import CollectiveReuse, PrefixKV

if TYPE_CHECKING:
    from agentserve.engine.model import CausalLM

REAL_FRACTIONS = (0.0, 0.05, 0.1, 0.15, 0.2, 0.3, 0.5)
LENGTHS = (1024, 2048, 4096)
TOP1_FLOOR = 0.95


@dataclass(frozen=True)
class Shape:
    name: str
    blocks: int
    block_tokens: int


SHAPES = (Shape("generative-agents", 4, 128), Shape("agent-society", 8, 64))


@dataclass(frozen=True)
class RealPromptSet:
    lengths: tuple[int, ...] = LENGTHS
    agents: int = 4  # prompts per round: the first leads, the others are scored
    tail_tokens: int = 32
    shapes: tuple[Shape, ...] = SHAPES

    def __post_init__(self) -> None:
        if self.agents < 2:
            raise ValueError(f"agents must be >= 2 (one leads, the rest are scored), got {self.agents}")
        for length in self.lengths:
            for shape in self.shapes:
                if length - shape.blocks * shape.block_tokens - self.tail_tokens < 1:
                    raise ValueError(f"a {length}-token prompt has no room for a history with {shape.name}'s blocks")


@dataclass(frozen=True)
class Cell:
    """One (shape, length, fraction) point."""

    shape: str
    prompt_tokens: int
    recompute_fraction: float
    top1_agreement: float
    mean_kl: float
    recomputed_share: float  # of the shared tokens, recomputed
    scored_positions: int


def run(
    model: CausalLM,
    stream: list[int],
    prompt_set: RealPromptSet = RealPromptSet(),
    fractions: tuple[float, ...] = REAL_FRACTIONS,
    log: Callable[[str], None] = print,
) -> dict:
    """Every cell, the fraction chosen by the floor, and the quality there; `stream` is the text's
    token ids (raises if too short)."""
    at = 0

    def take(n: int) -> tuple[int, ...]:
        nonlocal at
        if at + n > len(stream):
            raise ValueError(f"the prompt set needs more than the text's {len(stream)} tokens")
        at += n
        return tuple(stream[at - n : at])

    tail = prompt_set.tail_tokens
    reuse = CollectiveReuse(model, max_deviation=None, tail_logits=tail)
    cells: list[Cell] = []
    for length in prompt_set.lengths:
        history_tokens = {s.name: length - s.blocks * s.block_tokens - tail for s in prompt_set.shapes}
        histories = [take(max(history_tokens.values())) for _ in range(prompt_set.agents)]
        computed: dict[int, list[PrefixKV]] = {}  # by history length: shapes of equal block tokens share it
        for shape in prompt_set.shapes:
            h = history_tokens[shape.name]
            if h not in computed:  # each agent's history is a prefix-cache hit: its exact KV, computed once
                computed[h] = [PrefixKV(*reuse.full(history[:h])[1:]) for history in histories]
            prefixes = computed[h]
            blocks = tuple(
                SharedBlock(f"{shape.name}/{length}/m{b}", 1, take(shape.block_tokens)) for b in range(shape.blocks)
            )
            round_ = _Round([history[:h] for history in histories], blocks, [take(tail) for _ in histories])
            leader = reuse.prefill_round([round_.prompt(0, 0.5)], {}, prefixes=[prefixes[0]])
            agents = range(1, prompt_set.agents)
            references = [reuse.full(round_.prompt(a, 0.5).token_ids, prefixes[a])[0] for a in agents]
            for fraction in fractions:
                prefills = [reuse.prefill(round_.prompt(a, fraction), leader.masters, prefixes[a]) for a in agents]
                gaps = [distribution_gap(ref, p.logits) for ref, p in zip(references, prefills)]
                cell = Cell(
                    shape.name,
                    length,
                    fraction,
                    round(torch.cat([g.top1_agree for g in gaps]).double().mean().item(), 4),
                    round(torch.cat([g.kl for g in gaps]).mean().item(), 5),
                    round(
                        sum(p.stats.recomputed_shared_tokens for p in prefills)
                        / sum(p.stats.shared_tokens for p in prefills),
                        4,
                    ),
                    sum(g.top1_agree.numel() for g in gaps),
                )
                cells.append(cell)
                log(f"  {shape.name}, {length} tokens, fraction {fraction}: top-1 {cell.top1_agreement}")
    chosen = choose_fraction(cells, fractions)
    at_chosen = [c for c in cells if c.recompute_fraction == chosen] if chosen is not None else []
    return {
        "prompt_set": asdict(prompt_set),
        "fractions": list(fractions),
        "top1_floor": TOP1_FLOOR,
        "chosen_fraction": chosen,
        "top1_agreement": min(c.top1_agreement for c in at_chosen) if at_chosen else None,
        "mean_kl": max(c.mean_kl for c in at_chosen) if at_chosen else None,
        "lengths": sorted({c.prompt_tokens for c in cells}),
        "cells": [asdict(c) for c in cells],
    }


@dataclass(frozen=True)
class _Round:
    """One round's pieces: each agent's history and question, the gathered blocks."""

    histories: list[tuple[int, ...]]
    blocks: tuple[SharedBlock, ...]
    questions: list[tuple[int, ...]]

    def prompt(self, a: int, fraction: float) -> SegmentedPrompt:
        """Agent a's prompt: its history, the blocks rotated by its share of them, its question."""
        n = len(self.blocks)
        shift = a * max(1, n // len(self.histories))
        order = [self.blocks[(shift + i) % n] for i in range(n)]
        segments: tuple[Segment, ...] = (PrivateSegment(self.histories[a]), *order, PrivateSegment(self.questions[a]))
        return SegmentedPrompt(segments, ReusePolicy(recompute_fraction=fraction))


def choose_fraction(cells: list[Cell], fractions: tuple[float, ...]) -> float | None:
    """The smallest fraction whose top-1 agreement meets the floor in every cell measured at it
    (None if none does)."""
    for fraction in sorted(fractions):
        at = [c for c in cells if c.recompute_fraction == fraction]
        if at and all(c.top1_agreement >= TOP1_FLOOR for c in at):
            return fraction
    return None


def smollm2(threads: int = 1) -> tuple[CausalLM, str, list[int]]:
    """SmolLM2-135M-Instruct (fp32, `threads` torch threads), its fingerprint, and the project's
    corpus as its token ids."""
    from agentserve.engine.loader import load_model
    from agentserve.engine.model_catalog import SMOLLM2, resolve_model
    from agentserve.model_files.gguf_folder import model_folder
    from agentserve.model_files.tokenizer import Tokenizer
    from agentserve.training.corpus import corpus_blocks

    if threads:
        torch.set_num_threads(threads)
    folder = model_folder(resolve_model(SMOLLM2).source)
    model, fingerprint = load_model(folder, "fp32")
    return model, fingerprint, Tokenizer.from_dir(folder).encode("\n\n".join(corpus_blocks()))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--lengths", type=int, nargs="+", default=list(LENGTHS))
    parser.add_argument("--fractions", type=float, nargs="+", default=list(REAL_FRACTIONS))
    parser.add_argument("--threads", type=int, default=1)
    args = parser.parse_args()
    model, fingerprint, stream = smollm2(args.threads)
    result = run(model, stream, RealPromptSet(lengths=tuple(args.lengths)), tuple(args.fractions))
    print(json.dumps({"model_fingerprint": fingerprint, **result}))


if __name__ == "__main__":
    main()
