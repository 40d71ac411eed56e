"""Each emulated engine's KV pool at the bench's scale: DualPath's regime, where a prefill
engine's HBM holds about one context.

At the paper's scale (1024 agents over 8 prefill and 16 decode GPUs, `PAPER_AGENTS` and
`PAPER_ENGINES`) an engine's HBM holds about 27K tokens of KV per agent, less than one agent's
context: an agent's history is gone from a prefill engine's HBM by its next turn, and every hit is
read from the store (by path A or B). A bench of a few agents on 6 engines with the target's whole
HBM would keep every agent's history in the prefill engines and read almost nothing from the
store, the opposite regime. So a prefill engine's pool is `PREFILL_CONTEXTS` final contexts: one
prompt staged whole (a prefill without layerwise needs all of its cached KV in HBM before it
computes) and its new tokens; two long prompts do not fit at once, as on the target at the
paper's density. Sessions keep no KV on their decode engine between turns either (the bench's
`session_kv=store`), so a decode engine's pool holds the contexts it is decoding and relaying:
its share of the agents' final contexts with `DECODE_HEADROOM` (and no fewer than `MIN_CONTEXTS`);
a smaller one deadlocks admission, a larger one changes nothing. Pools are set through the
engines' `kv_blocks` (agentserve.engine.emulation_config).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

PAPER_AGENTS = 1024
PAPER_ENGINES = 24  # one prefill node and two decode nodes of 8 GPUs (P:D 1:2)
PREFILL_CONTEXTS = 1.25  # one final context staged whole, and room for its new tokens and output
MIN_CONTEXTS = 4
DECODE_HEADROOM = 1.25


@dataclass(frozen=True)
class PoolPlan:
    block_size: int
    target_pool_tokens: int  # what the target GPU's HBM holds
    prefill_pool_tokens: int
    decode_pool_tokens: int

    @property
    def prefill_blocks(self) -> int:
        """The prefill engines' `kv_blocks` setting (whole blocks covering their pool tokens)."""
        return -(-self.prefill_pool_tokens // self.block_size)

    @property
    def decode_blocks(self) -> int:
        return -(-self.decode_pool_tokens // self.block_size)

    def to_dict(self) -> dict[str, float | int]:
        return {
            "target_pool_tokens_per_engine": self.target_pool_tokens,
            "prefill_pool_tokens_per_engine": self.prefill_pool_tokens,
            "decode_pool_tokens_per_engine": self.decode_pool_tokens,
            "prefill_kv_blocks": self.prefill_blocks,
            "decode_kv_blocks": self.decode_blocks,
            "paper_agents": PAPER_AGENTS,
            "paper_engines": PAPER_ENGINES,
        }


def prefill_pool_tokens(target_pool_tokens: int, final_context: int) -> int:
    return min(target_pool_tokens, round(PREFILL_CONTEXTS * final_context))


def decode_pool_tokens(target_pool_tokens: int, agents: int, decoders: int, final_context: int) -> int:
    contexts = max(MIN_CONTEXTS, math.ceil(DECODE_HEADROOM * agents / decoders))
    return min(target_pool_tokens, contexts * final_context)


def plan(
    target_model: str,
    target_gpu: str,
    block_size: int,
    agents: int,
    prefill: int,
    decoders: int,
    final_context: int,
    pool_tokens: int | None = None,
) -> PoolPlan:
    """Each role's pool (`pool_tokens`: the prefill engines' instead); ValueError if one is more
    than the target GPU holds."""
    from agentserve.costmodel.gpus import target_gpu as gpu_named
    from agentserve.costmodel.kv_capacity import DEFAULT_ACTIVATION_RESERVE, kv_capacity_blocks
    from agentserve.costmodel.models import target_model as model_named
    from agentserve.costmodel.timing import ComputeCost

    cost = ComputeCost(model_named(target_model), gpu_named(target_gpu))
    target_tokens = kv_capacity_blocks(cost, block_size, DEFAULT_ACTIVATION_RESERVE) * block_size
    prefill_tokens = prefill_pool_tokens(target_tokens, final_context) if pool_tokens is None else pool_tokens
    if not 0 < prefill_tokens <= target_tokens:
        raise ValueError(
            f"--kv-pool-tokens {prefill_tokens} is outside what {target_gpu} holds for {target_model} "
            f"(1 to {target_tokens} tokens)"
        )
    return PoolPlan(
        block_size, target_tokens, prefill_tokens, decode_pool_tokens(target_tokens, agents, decoders, final_context)
    )
