"""EPLB's planner: exact packings and replica counts, and the hierarchical plan's invariants."""

from __future__ import annotations

import random

import pytest

from agentserve.costmodel.eplb import ClusterLayout, balanced_packing, plan_layer, replicate, static_placement
from agentserve.costmodel.expert_parallel import rank_loads

pytestmark = pytest.mark.unit


def test_balanced_packing_puts_heaviest_first_into_the_lightest_pack_with_room():
    # 9 -> pack 0, 7 -> pack 1, 5 -> pack 1 (7 < 9), 4 -> pack 0 (12 > 9), 1 -> pack 1 (12 < 13),
    # which is then full (3 items), so the last 1 -> pack 0.
    assert balanced_packing([9, 7, 5, 4, 1, 1], 2) == [0, 1, 1, 0, 1, 0]


def test_balanced_packing_needs_items_dividing_into_packs():
    with pytest.raises(ValueError, match="do not divide"):
        balanced_packing([1, 2, 3], 2)


def test_replicate_gives_each_spare_to_the_highest_load_per_replica():
    # 12 -> 2 replicas (6 each), then 6 vs 5: 12 again (4 each), then 5 is highest: 2 replicas.
    assert replicate([12, 5, 1], 6) == [3, 2, 1]


def test_static_placement_is_contiguous():
    assert static_placement(8, ClusterLayout(4, 2, 2)) == [0, 1, 2, 3, 4, 5, 6, 7]


def test_hierarchical_plan_keeps_groups_on_nodes_and_serves_every_expert():
    rng = random.Random(3)
    weights = [rng.paretovariate(1.2) for _ in range(64)]
    layout = ClusterLayout(ranks=16, gpus_per_node=4, slots_per_rank=5)
    placement = plan_layer(weights, groups=8, layout=layout)
    assert len(placement) == layout.slots
    assert set(placement) == set(range(64))
    per_node = layout.slots // layout.nodes
    for node in range(layout.nodes):
        groups = {e // 8 for e in placement[node * per_node : (node + 1) * per_node]}
        assert len(groups) == 2  # 8 groups over 4 nodes: two whole groups each
    balanced = rank_loads(weights, placement, 16)
    plain = rank_loads(weights, static_placement(64, ClusterLayout(16, 4, 4)), 16)
    mean = sum(weights) / 16
    assert max(balanced) / mean < max(plain) / mean
    assert sum(balanced) == pytest.approx(sum(weights))


def test_groups_not_dividing_over_nodes_fall_back_to_the_global_policy():
    weights = [8.0, 1.0, 1.0, 1.0, 1.0, 1.0]  # 3 groups of 2 over 2 nodes: one global pack
    layout = ClusterLayout(ranks=2, gpus_per_node=1, slots_per_rank=4)
    placement = plan_layer(weights, groups=3, layout=layout)
    assert placement.count(0) == 3  # the hot expert takes the two spares: 8 / 3 per replica
    # Greedy packing of 8/3, 8/3, 8/3, 1 x 5 into two GPUs of 4 slots: two hot replicas and two
    # ones on GPU 0 (22/3), one hot replica and three ones on GPU 1 (17/3).
    assert rank_loads(weights, placement, 2) == pytest.approx([22 / 3, 17 / 3])
