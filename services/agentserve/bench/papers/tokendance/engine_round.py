"""Round prefill time on the real engine: per-request position-independent reuse (PIC) vs collective.

The trained default model (`engine.default_model`) prefills one gather round of a workload with
`engine.shared_context.CollectiveReuse`, three ways, with the same selection budget and rule
(each block's anchors, the private tokens, the last token), on the same model and threads:

- **PIC**, as CacheBlend and EPIC run it (`share_masters=False`): each shared block's KV computed
  once for the round, alone at position 0, into a chunk cache every request reads (the blocks side
  by side in one forward per layer), then each request's selective recompute on its own;
- **collective, one by one**: the round's first prompt computed in full gives the masters, each
  later prompt's selective recompute on its own (the served engine's order);
- **collective** (`together=True`, the headline): the same masters, the later prompts' selected
  tokens recomputed together, one forward per layer for the group (TokenDance's collective
  recompute). Each prompt's KV and logits are the one-by-one run's bit for bit.

Each way runs `repeats` times, interleaved (PIC, one by one, collective, PIC, ...), and the
fastest of each counts: this machine's two cores are shared, and the minimum is the run the
least disturbed. KV held at the round's end, in full-token equivalents: every policy every
prompt's KV, PIC also its chunk cache (collective's masters are its leader's KV).

Token ids are synthetic (`bench.common.workloads.tokens.TokenSynth`: a block is the same ids in every
prompt that holds it); prefill time does not depend on what the ids say. At the default token
scale the round is a fraction of the workload's length: this machine's two cores cannot prefill
32 full-length prompts several times within the bench's budget (the scale is in the report).
"""

from __future__ import annotations

import argparse
import json
import time
from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING

from agentserve.bench.common.workloads.tokens import TokenSynth
from agentserve.bench.papers.tokendance.workload import AgentRound, RoundShape, rounds
from agentserve.contracts.segments import PrivateSegment, ReusePolicy, Segment, SegmentedPrompt, SharedBlock

if TYPE_CHECKING:
    from agentserve.engine.model import CausalLM


@dataclass(frozen=True)
class RoundTiming:
    workload: str
    round_index: int
    agents: int
    prompt_tokens: int  # summed over the round's prompts
    shared_tokens: int  # of those, in shared blocks
    recompute_fraction: float
    per_request_s: float  # PIC with a chunk cache, each request's recompute on its own
    collective_one_by_one_s: float  # collective masters, each request's recompute on its own
    collective_s: float  # collective masters, the requests' recompute together
    masters_per_request: int  # the chunk cache's blocks
    masters_collective: int
    kv_held_tokens_pic: int  # every prompt's KV and the chunk cache
    kv_held_tokens_collective: int  # every prompt's KV
    repeats: int
    prefill_speedup_vs_pic: float  # per_request_s / collective_s
    prefill_speedup_one_by_one: float  # per_request_s / collective_one_by_one_s

    def as_dict(self) -> dict:
        return asdict(self)


def round_prompts(shape: RoundShape, agents: list[AgentRound], policy: ReusePolicy) -> list[SegmentedPrompt]:
    """Each agent's prompt of the round: its history and this round's own tokens (private), then
    the gathered blocks in its order."""
    synth = TokenSynth()
    r = agents[0].round_index
    blocks = [
        SharedBlock(
            f"{shape.name}/r{r}/agent{a}", r, tuple(synth.content(f"{shape.name}/r{r}/out{a}", shape.output_tokens))
        )
        for a in range(shape.agents)
    ]
    prompts = []
    for agent in agents:
        own = synth.content(f"{shape.name}/agent{agent.agent}/r{r}", agent.history_tokens + agent.private_tokens)
        segments: tuple[Segment, ...] = (PrivateSegment(tuple(own)), *(blocks[b] for b in agent.block_order))
        prompts.append(SegmentedPrompt(segments, policy))
    return prompts


def time_round(
    shape: RoundShape, round_index: int, recompute_fraction: float, model: CausalLM, repeats: int = 3
) -> RoundTiming:
    """Prefill gather round `round_index` (1-based) of `shape` the three ways on `model` (a
    CausalLM), `repeats` times each, interleaved; the fastest of each."""
    from agentserve.engine.shared_context import CollectiveReuse

    all_rounds = rounds(shape)
    if not 1 <= round_index <= len(all_rounds):
        raise ValueError(f"round_index must be in [1, {len(all_rounds)}], got {round_index}")
    if repeats < 1:
        raise ValueError(f"repeats must be >= 1, got {repeats}")
    agents = all_rounds[round_index - 1]
    prompts = round_prompts(shape, agents, ReusePolicy(recompute_fraction=recompute_fraction))
    # No fallback: every way must do the reuse it is timed for (and so no unused estimate).
    reuse = CollectiveReuse(model, max_deviation=None, estimate=False)
    ways = {
        "pic": lambda: reuse.prefill_round(prompts, share_masters=False),
        "one_by_one": lambda: reuse.prefill_round(prompts),
        "collective": lambda: reuse.prefill_round(prompts, together=True),
    }
    best = dict.fromkeys(ways, float("inf"))
    results = {}
    for _ in range(repeats):
        for name, way in ways.items():
            started = time.perf_counter()
            results[name] = way()
            best[name] = min(best[name], time.perf_counter() - started)
    prompt_tokens = sum(len(p.token_ids) for p in prompts)
    return RoundTiming(
        workload=shape.name,
        round_index=round_index,
        agents=shape.agents,
        prompt_tokens=sum(a.prompt_tokens for a in agents),
        shared_tokens=sum(a.shared_tokens for a in agents),
        recompute_fraction=recompute_fraction,
        per_request_s=round(best["pic"], 3),
        collective_one_by_one_s=round(best["one_by_one"], 3),
        collective_s=round(best["collective"], 3),
        masters_per_request=results["pic"].masters_computed,
        masters_collective=results["collective"].masters_computed,
        kv_held_tokens_pic=prompt_tokens + results["pic"].master_tokens,
        kv_held_tokens_collective=prompt_tokens,
        repeats=repeats,
        prefill_speedup_vs_pic=round(best["pic"] / best["collective"], 3),
        prefill_speedup_one_by_one=round(best["pic"] / best["one_by_one"], 3),
    )


def main() -> None:
    """`python -m agentserve.bench.papers.tokendance.engine_round`: the round prefill of both
    workloads as `bench tokendance` times it, one JSON line each."""
    from agentserve.bench.papers.tokendance.bench import BenchSpec, _model

    spec = BenchSpec()
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--token-scale", type=int, default=spec.engine_token_scale)
    parser.add_argument("--round", type=int, default=spec.engine_round)
    parser.add_argument("--recompute-fraction", type=float, default=spec.recompute_fraction)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    model = _model(spec)
    for shape in spec.shapes():
        timing = time_round(shape.scaled(args.token_scale), args.round, args.recompute_fraction, model, args.repeats)
        print(json.dumps(timing.as_dict()), flush=True)


if __name__ == "__main__":
    main()
