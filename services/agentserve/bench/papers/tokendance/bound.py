"""The most agents a collective policy could serve at the served regime's SLO and KV budget,
measured in the same run as the served capacity (served.py), so the measured ratio reads
against what this model, machine, SLO and budget allow:

    memory bound  the largest agent count whose collective KV ledger at the end of the last
                  round fits the budget: every agent's private tokens in full, its gathered
                  tokens at the diff share, every round's masters (`served.context_cost` in a
                  `served.KVLedger`, the ledger the served search keeps). Contexts and masters
                  only grow, so the end is the peak; past this count contexts are evicted and
                  their histories computed again, which costs time, not a refusal.
    bound         the count served within the SLO at the regime's budget by the blend's floor:
                  every later agent's blended prefill recomputes no shared token (recompute
                  fraction 0: only its private new tokens and the prompt's last token run, in
                  every layer, attending to the whole prompt's reused KV), the round's leader
                  computed in full, agents in turn, the same ledger and eviction as every policy.
                  Whatever a selection repairs costs more than nothing, so no collective policy
                  served this way reaches more; what it does not cover is serving a round's agents
                  other than in turn. Below the memory bound it is SLO-bound; it may pass the
                  memory bound where the SLO leaves time to compute evicted histories again.
    ratio         bound / prefix caching's measured count.

The bound keeps the served search's granularity (within an eighth of the workload's count,
served.served_capacity); the memory bound is exact to one agent.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

from agentserve.bench.papers.tokendance.served import (
    KVLedger,
    Regime,
    ServedCapacity,
    ServedSpec,
    context_cost,
    served_capacity,
)
from agentserve.bench.papers.tokendance.workload import RoundShape, first_turn_tokens, rounds

if TYPE_CHECKING:
    from agentserve.engine.model import CausalLM

FLOOR = (
    "every later agent's blend runs only its private new tokens and the last token (recompute fraction 0), "
    "attending to the whole prompt's reused KV; the round's leader computed in full; agents in turn; "
    "the regime's SLO and budget"
)


def collective_kv_tokens(shape: RoundShape, diff_share: float) -> float:
    """Collective's ledger at the end of `shape`'s last round with nothing evicted (`shape` at
    its token scale): the contexts served.RoundServer admits, in the order it admits them."""
    ledger = KVLedger(math.inf, shape.agents)
    for a, first in enumerate(first_turn_tokens(shape)):
        ledger.admit(a, context_cost("collective", first + shape.output_tokens, 0, diff_share))
    for agent_rounds in rounds(shape):
        ledger.fixed += shape.gathered_tokens  # the round's masters, made by its leader
        for plan in agent_rounds:
            tokens, shared = plan.prompt_tokens + plan.output_tokens, plan.history_shared_tokens + plan.shared_tokens
            ledger.admit(plan.agent, context_cost("collective", tokens, shared, diff_share))
    return ledger.used


def memory_bound(shape: RoundShape, token_scale: int, diff_share: float, budget_tokens: float) -> int | None:
    """The largest agent count whose collective ledger fits `budget_tokens` (None: unbounded),
    by doubling then bisection (the ledger grows with the count, about as its square)."""
    if math.isinf(budget_tokens):
        return None

    def fits(agents: int) -> bool:
        return collective_kv_tokens(replace(shape, agents=agents).scaled(token_scale), diff_share) <= budget_tokens

    if not fits(1):
        return 0
    low, high = 1, 2
    while fits(high):
        low, high = high, 2 * high
    while high - low > 1:
        mid = (low + high) // 2
        low, high = (mid, high) if fits(mid) else (low, mid)
    return low


@dataclass(frozen=True)
class CollectiveBound:
    memory_agents: int | None  # nothing evicted up to this count (None: the budget is unbounded)
    floor: ServedCapacity  # the blend's floor served in the regime (module docstring): the bound
    prefix_agents: int  # prefix caching's measured count in the same regime

    @property
    def max_agents(self) -> int:
        return self.floor.max_agents

    @property
    def ratio(self) -> float:
        return self.max_agents / self.prefix_agents if self.prefix_agents else math.inf

    def as_dict(self) -> dict:
        return {
            "max_agents": self.max_agents,
            "limited_by": self.floor.limited_by,
            "concurrent_agents_ratio_bound": round(self.ratio, 3),
            "memory_bound_agents": self.memory_agents,
            "floor": FLOOR,
            "floor_probes": self.floor.as_dict()["probes"],
        }


def collective_bound(
    model: CausalLM,
    shape: RoundShape,
    spec: ServedSpec,
    regime: Regime,
    prefix_agents: int,
    log: Callable[[str], None] = lambda _: None,
) -> CollectiveBound:
    """The memory bound and the floor's count for `shape` in `regime` (the served search's SLO and budget)."""
    memory = memory_bound(shape, spec.token_scale, spec.diff_share, regime.budget_tokens)
    floor = served_capacity(
        model,
        shape,
        "collective",
        replace(spec, recompute_fraction=0.0),
        regime,
        log=lambda line: log(f"{line} (the blend's floor)"),
    )
    return CollectiveBound(memory, floor, prefix_agents)
