"""Round prefill time on the real engine: per-request position-independent reuse vs collective.

The trained default model (`engine.default_model`) prefills one gather round of a workload with
`engine.shared_context.CollectiveReuse`: collectively (`share_masters=True`: each shared block's
master computed once for the round) and per request (`share_masters=False`: every request computes
the masters of the blocks it holds, as a per-request position-independent cache that shares
nothing between a round's requests). Both recompute the same fraction of each block and the same
private tokens, on the same model and threads, one after the other.

Token ids are synthetic (`bench.common.workloads.tokens.TokenSynth`: a block is the same ids in every
prompt that holds it); prefill time does not depend on what the ids say. At the default token
scale the round is a fraction of the workload's length: this machine's two cores cannot prefill
32 full-length prompts twice within the bench's budget (the scale is in the report).
"""

from __future__ import annotations

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
    per_request_s: float
    collective_s: float
    masters_per_request: int
    masters_collective: int
    prefill_speedup_vs_pic: float

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


def time_round(shape: RoundShape, round_index: int, recompute_fraction: float, model: CausalLM) -> RoundTiming:
    """Prefill gather round `round_index` (1-based) of `shape` both ways on `model` (a CausalLM)."""
    from agentserve.engine.shared_context import CollectiveReuse

    all_rounds = rounds(shape)
    if not 1 <= round_index <= len(all_rounds):
        raise ValueError(f"round_index must be in [1, {len(all_rounds)}], got {round_index}")
    agents = all_rounds[round_index - 1]
    prompts = round_prompts(shape, agents, ReusePolicy(recompute_fraction=recompute_fraction))
    # No fallback: both ways must do the reuse they are timed for (and so no unused estimate).
    reuse = CollectiveReuse(model, max_deviation=None, estimate=False)
    started = time.perf_counter()
    per_request = reuse.prefill_round(prompts, share_masters=False)
    per_request_s = time.perf_counter() - started
    started = time.perf_counter()
    collective = reuse.prefill_round(prompts, share_masters=True)
    collective_s = time.perf_counter() - started
    return RoundTiming(
        workload=shape.name,
        round_index=round_index,
        agents=shape.agents,
        prompt_tokens=sum(a.prompt_tokens for a in agents),
        shared_tokens=sum(a.shared_tokens for a in agents),
        recompute_fraction=recompute_fraction,
        per_request_s=round(per_request_s, 3),
        collective_s=round(collective_s, 3),
        masters_per_request=per_request.masters_computed,
        masters_collective=collective.masters_computed,
        prefill_speedup_vs_pic=round(per_request_s / collective_s, 3),
    )
