"""The simulated workloads: the paper's agents, tool waits and online arrivals.

Agents are `bench dualpath`'s (`bench/papers/dualpath/workload.py`: contexts that grow turn by turn
from a shared prefix), sized to the paper's turn.
"""

from __future__ import annotations

import random

from agentserve.bench.papers.dualpath.workload import AgentWorkloadSpec

# The paper's agent turn (DualPath, 2025): ~32.7K tokens of context, ~429 appended, 98.7% hit. The
# agents' contexts grow from 24K to 40K over 38 turns, so the mean context is 32.8K and a later
# turn appends 427 tokens (16 of them the previous output); the first turn computes 512 tokens
# after a prefix every agent shares, as `bench dualpath`'s first turn does.
PAPER_WORKLOAD = AgentWorkloadSpec(
    agents=1024, turns=38, first_context=24_576, final_context=40_960, output_tokens=16, shared_prefix=24_064
)
DEFAULT_PROFILE = "dualpath-h800"  # the paper's node: 8 GPUs, one 400 Gbps SNIC, a 400 Gbps CNIC per GPU
DEFAULT_TOOL_WAIT_S = 1.0  # mean of the exponential tool wait between an agent's turns


def poisson_arrivals(rate: float, duration_s: float, seed: int) -> list[float]:
    """Arrival times of a Poisson process of `rate` per second over `duration_s` (at least one)."""
    if not (rate > 0 and duration_s > 0):
        raise ValueError(f"arrivals need a positive rate and duration, got {rate}/s over {duration_s} s")
    rng = random.Random(seed)
    times: list[float] = []
    t = rng.expovariate(rate)
    while t < duration_s or not times:
        times.append(t)
        t += rng.expovariate(rate)
    return times
