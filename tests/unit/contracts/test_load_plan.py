"""LoadPlan.blocks_by_b / scaled_to: how many of the blocks a prefill engine loads go by path B."""

from __future__ import annotations

import pytest

from agentserve.contracts import PATH_A, KVPath, LoadPlan

pytestmark = pytest.mark.unit


def test_a_none_b_all_split_the_plans_share_of_what_is_loaded() -> None:
    b, split = LoadPlan(KVPath.B, "h:1"), LoadPlan(KVPath.SPLIT, "h:1", relay_blocks=4)
    assert [PATH_A.blocks_by_b(n, 8) for n in (0, 2, 8)] == [0, 0, 0]
    assert [b.blocks_by_b(n, 8) for n in (0, 2, 8)] == [0, 2, 8]
    # Half of the 8 hits by B: half of whatever the engine loads, rounded half up.
    assert [split.blocks_by_b(n, 8) for n in (0, 1, 2, 3, 8)] == [0, 1, 1, 2, 4]
    third = LoadPlan(KVPath.SPLIT, "h:1", relay_blocks=1)
    assert [third.blocks_by_b(n, 3) for n in (1, 2, 3, 4)] == [0, 1, 1, 1]
    # A plan naming more relay blocks than hits relays everything it loads.
    assert LoadPlan(KVPath.SPLIT, "h:1", relay_blocks=9).blocks_by_b(5, 8) == 5


def test_scaled_to_rewrites_a_split_for_the_blocks_loaded() -> None:
    split = LoadPlan(KVPath.SPLIT, "h:1", relay_blocks=4)
    assert split.scaled_to(3, 8) == LoadPlan(KVPath.SPLIT, "h:1", relay_blocks=2)
    b = LoadPlan(KVPath.B, "h:1")
    assert (PATH_A.scaled_to(3, 8), b.scaled_to(3, 8)) == (PATH_A, b)
