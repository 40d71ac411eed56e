"""The router's split of a replicated expert's copies over its replicas: the exact rank of each
copy, and the placements refused."""

import pytest
import torch

from agentserve.costmodel.eplb import ClusterLayout
from agentserve.engine.expert_placement import ExpertPlacement, ReplicaSplit

pytestmark = pytest.mark.unit


def split_for(placement: ExpertPlacement, row: int = 0) -> ReplicaSplit:
    return ReplicaSplit(placement.replica_ranks(row), placement.ranks, torch.zeros(placement.ranks, dtype=torch.int64))


def test_copies_go_round_robin_over_replicas_in_token_order():
    # Rank 0 holds experts 0 and 1, rank 1 experts 0 and 2: expert 0 is replicated on ranks 0 and 1.
    placement = ExpertPlacement(ranks=2, layers=(0,), slots=((0, 1, 0, 2),))
    assert placement.replica_ranks(0) == [[0, 1], [0], [1]]
    split = split_for(placement)
    chosen = torch.tensor([[0, 1], [0, 2], [2, 0], [0, 1]])
    # Expert 0's copies, in token order (tokens 0, 1, 2, 3), alternate ranks 0, 1, 0, 1.
    assert split.assign(chosen).tolist() == [[0, 0], [1, 1], [1, 0], [1, 0]]
    assert split.rank_counts.tolist() == [4, 4]


def test_replicas_are_taken_in_slot_order_and_the_split_restarts_each_forward():
    # Expert 0 in slots 0, 2, 3, 5: replicas on ranks 0, 1, 1, 2.
    placement = ExpertPlacement(ranks=3, layers=(4,), slots=((0, 1, 0, 0, 2, 0),))
    split = split_for(placement)
    six = torch.zeros(6, 1, dtype=torch.int64)
    assert split.assign(six).flatten().tolist() == [0, 1, 1, 2, 0, 1]
    assert split.assign(six[:2]).flatten().tolist() == [0, 1]
    assert split.rank_counts.tolist() == [3, 4, 1]


def test_each_replica_gets_the_floor_or_ceiling_of_an_even_share():
    # Expert 0 on ranks 0, 1 and 3, expert 1 on rank 2.
    placement = ExpertPlacement(ranks=4, layers=(0,), slots=((0, 0, 1, 0),))
    split = split_for(placement, 0)
    chosen = torch.tensor([[0], [1], [0], [0], [0], [0], [0], [0]])
    assert split.assign(chosen).flatten().tolist() == [0, 2, 1, 3, 0, 1, 3, 0]
    assert split.rank_counts.tolist() == [3, 2, 1, 2]  # expert 0's 7 copies as 3 + 2 + 2 over its 3 replicas


def test_plan_places_every_expert_and_round_trips_through_json(tmp_path):
    placement = ExpertPlacement.plan([0, 1], [[8, 1, 1, 1], [1, 1, 1, 8]], ClusterLayout(2, 2, 3))
    placement.check([0, 1], 4)
    assert [sorted(set(s)) for s in placement.slots] == [[0, 1, 2, 3], [0, 1, 2, 3]]
    assert placement.slots[0].count(0) == 3 and placement.slots[1].count(3) == 3  # the hot expert's spares
    path = tmp_path / "placement.json"
    placement.write(path)
    assert ExpertPlacement.read(path) == placement


@pytest.mark.parametrize(
    ("placement", "message"),
    [
        (ExpertPlacement(ranks=2, layers=(0,), slots=((0, 1, 2, 2),)), r"layer 0 gives experts \[3\] no replica"),
        (ExpertPlacement(ranks=2, layers=(1,), slots=((0, 1, 2, 3),)), r"layers \[1\] are not the model's \[0\]"),
        (ExpertPlacement(ranks=2, layers=(0,), slots=((0, 1, 2, 4),)), "outside 0..3"),
    ],
)
def test_a_placement_that_does_not_fit_the_model_is_refused(placement, message):
    with pytest.raises(ValueError, match=message):
        placement.check([0], 4)


def test_malformed_placements_are_refused(tmp_path):
    with pytest.raises(ValueError, match="do not divide over 2"):
        ExpertPlacement(ranks=2, layers=(0,), slots=((0, 1, 2),))
    with pytest.raises(ValueError, match="format"):
        ExpertPlacement.from_json({"format": "other", "ranks": 1, "layers": [0], "slots": [[0]]})
    with pytest.raises(ValueError, match="expert placement"):
        ExpertPlacement.read(tmp_path / "missing.json")
