"""Each emulated engine's KV pool at the bench's scale.

At the paper's scale (1024 agents over 8 prefill and 16 decode GPUs, `PAPER_AGENTS` and
`PAPER_ENGINES`) an engine's HBM holds about 27K tokens of KV per agent, less than one agent's
context: an agent's history is gone from HBM by its next turn and every hit is read from the store
(by path A or B). A bench of 32 agents on 6 engines with the target's full HBM would hold every
agent's history in HBM and read almost nothing from the store, the opposite regime. So the pool
is scaled with the agents: the same HBM per agent as at the paper's scale,

    pool tokens = target pool tokens * (agents / engines) / (PAPER_AGENTS / PAPER_ENGINES)

but never below `MIN_CONTEXTS` final contexts, so an engine still holds the few sequences a
step works on (a prefill without layerwise stages its whole prefix; a decode keeps its context).
It is set through the engines' activation reserve (the share of HBM kept from the pool).
"""

from __future__ import annotations

from dataclasses import dataclass

PAPER_AGENTS = 1024
PAPER_ENGINES = 24  # one prefill node and two decode nodes of 8 GPUs (P:D 1:2)
MIN_CONTEXTS = 4


@dataclass(frozen=True)
class PoolPlan:
    target_pool_tokens: int  # what the target GPU's HBM holds
    pool_tokens: int  # what each engine gets here
    activation_reserve: float  # the engine setting that leaves `pool_tokens`

    def to_dict(self) -> dict[str, float | int]:
        return {
            "target_pool_tokens_per_engine": self.target_pool_tokens,
            "pool_tokens_per_engine": self.pool_tokens,
            "activation_reserve": round(self.activation_reserve, 6),
            "paper_agents": PAPER_AGENTS,
            "paper_engines": PAPER_ENGINES,
        }


def scaled_pool_tokens(target_pool_tokens: int, agents: int, engines: int, final_context: int) -> int:
    scaled = round(target_pool_tokens * (agents / engines) / (PAPER_AGENTS / PAPER_ENGINES))
    return min(target_pool_tokens, max(scaled, MIN_CONTEXTS * final_context))


def plan(
    target_model: str,
    target_gpu: str,
    agents: int,
    engines: int,
    final_context: int,
    pool_tokens: int | None = None,
) -> PoolPlan:
    """The activation reserve that leaves each engine `pool_tokens` (None: scaled as above)."""
    from agentserve.costmodel.gpus import target_gpu as gpu_named
    from agentserve.costmodel.kv_capacity import DEFAULT_ACTIVATION_RESERVE, kv_capacity_blocks
    from agentserve.costmodel.models import target_model as model_named
    from agentserve.costmodel.timing import ComputeCost

    cost = ComputeCost(model_named(target_model), gpu_named(target_gpu))
    target_tokens = kv_capacity_blocks(cost, 1, DEFAULT_ACTIVATION_RESERVE)
    tokens = scaled_pool_tokens(target_tokens, agents, engines, final_context) if pool_tokens is None else pool_tokens
    hbm = cost.gpu.hbm_bytes
    reserve = (hbm - cost.weight_bytes_per_gpu - tokens * cost.model.kv_bytes_per_token) / hbm
    if not 0 <= reserve < 1:
        raise ValueError(
            f"a KV pool of {tokens} tokens per engine is outside what {target_gpu} holds for {target_model} "
            f"(at most {target_tokens}); lower --kv-pool-tokens"
        )
    return PoolPlan(target_tokens, tokens, reserve)
