"""bench tokendance's bound: the most agents a collective policy could serve at the served
regime's SLO and budget (memory: collective's ledger; compute: the blend's floor)."""

from __future__ import annotations

import math
from dataclasses import replace

import pytest

from agentserve.bench.papers.tokendance.bound import collective_bound, collective_kv_tokens, memory_bound
from agentserve.bench.papers.tokendance.served import Regime, RoundServer, ServedSpec
from agentserve.bench.papers.tokendance.workload import RoundShape, first_turn_tokens
from agentserve.engine.loader import load_model

pytestmark = pytest.mark.unit

SHAPE = RoundShape("t", agents=3, rounds=2, first_tokens=10, private_tokens=4, output_tokens=8, order="rotated")


@pytest.fixture(scope="module")
def model(tiny_model_dir):
    return load_model(tiny_model_dir)[0]


def _by_hand(shape: RoundShape, diff_share: float) -> float:
    """Each agent ends holding its first turn and output, then per round its private tokens, every
    agent's block and its own output; the gathered blocks at the diff share; plus every round's masters."""
    n, r, out = shape.agents, shape.rounds, shape.output_tokens
    gathered = r * n * out  # per agent, over the rounds
    contexts = sum(first + out + r * (shape.private_tokens + n * out + out) for first in first_turn_tokens(shape))
    return contexts - n * gathered * (1 - diff_share) + r * n * out


def test_collective_ledger_at_the_end_is_private_in_full_gathered_at_the_diff_share_and_the_masters() -> None:
    firsts = first_turn_tokens(SHAPE)
    # 3 agents, 2 rounds: each context ends at first + 8 + 2 x (4 + 24 + 8), 48 of it gathered, held at half.
    expected = sum(firsts) + 3 * (8 + 72) - 3 * 48 * 0.5 + 2 * 24
    assert collective_kv_tokens(SHAPE, 0.5) == expected == _by_hand(SHAPE, 0.5)
    assert collective_kv_tokens(SHAPE, 1.0) == sum(firsts) + 3 * 80 + 48  # diffs as large as full copies


def test_the_ledger_walk_is_what_the_served_collective_holds(model) -> None:
    spec = ServedSpec(diff_share=0.25)
    probe = RoundServer(model, SHAPE, "collective", spec, math.inf).serve(math.inf)
    assert probe.rounds[-1].kv_tokens == round(collective_kv_tokens(SHAPE, 0.25), 1)


def test_the_memory_bound_is_the_largest_count_whose_ledger_fits() -> None:
    at = {n: collective_kv_tokens(replace(SHAPE, agents=n), 0.5) for n in range(1, 12)}
    assert all(at[n] < at[n + 1] for n in range(1, 11))  # grows with the count here
    assert memory_bound(SHAPE, 1, 0.5, at[7]) == 7  # exactly full fits
    assert memory_bound(SHAPE, 1, 0.5, at[7] - 0.5) == 6
    assert memory_bound(SHAPE, 1, 0.5, at[1] - 1) == 0
    assert memory_bound(SHAPE, 1, 0.5, math.inf) is None
    # At a token scale the ledger is the scaled shape's: every count divided by it.
    assert memory_bound(SHAPE, 2, 0.5, collective_kv_tokens(replace(SHAPE, agents=9).scaled(2), 0.5)) == 9


def test_the_compute_floor_recomputes_no_shared_token(model) -> None:
    spec = ServedSpec(recompute_fraction=0.0, token_scale=1)
    probe = RoundServer(model, SHAPE, "collective", spec, math.inf).serve(math.inf)
    # The leader runs its 12 own tokens and the 3 blocks of 8; the others their 12 own tokens and
    # the prompt's last token (its last block's), nothing else of the blocks.
    assert [r.computed_tokens for r in probe.rounds] == [36 + 2 * 13, 36 + 2 * 13]


def test_the_bound_is_the_floor_served_in_the_regime_past_the_memory_bound_where_the_slo_allows(model) -> None:
    spec = ServedSpec(token_scale=1, diff_share=0.5)
    budget = collective_kv_tokens(replace(SHAPE, agents=5), 0.5)
    # An SLO nothing reaches: the floor's search ends at the largest count probed, 4 x 3 = 12, past
    # the memory bound (5), computing evicted histories again.
    found = collective_bound(model, SHAPE, spec, Regime(1e9, budget, False), prefix_agents=2)
    assert found.memory_agents == 5 and found.max_agents == 12 and found.ratio == 6.0
    assert found.as_dict()["limited_by"] == "max probed" and found.as_dict()["concurrent_agents_ratio_bound"] == 6.0
    probes = {p.agents: p for p in found.floor.probes}
    assert not any(r.evictions for r in probes[4].rounds)  # within the memory bound nothing is evicted
    assert sum(r.recomputed_history_tokens for r in probes[12].rounds) > 0  # past it, histories computed again
    # An SLO no count meets: the bound is 0, limited by the SLO, whatever the memory allows.
    none = collective_bound(model, SHAPE, spec, Regime(1e-9, budget, False), prefix_agents=3)
    assert none.max_agents == 0 and none.as_dict()["limited_by"] == "slo" and none.memory_agents == 5
