"""Turn queues: the exact order in which waiting turns start for given arrivals and weights, and
whose turn a full queue sheds."""

from __future__ import annotations

import pytest

from agentserve.scheduler.fair_queue import FifoQueue, WeightedFairQueue, make_turn_queue

pytestmark = pytest.mark.unit


def drain(queue) -> list[str]:
    return [queue.pop() for _ in range(len(queue))]


def test_wfq_serves_backlogged_tenants_in_proportion_to_their_weights() -> None:
    queue = WeightedFairQueue({"a": 2.0})
    for i in range(1, 7):
        queue.push("a", f"a{i}")
    for i in range(1, 4):
        queue.push("b", f"b{i}")
    # Start tags: a 0, 0.5, 1, 1.5, 2, 2.5; b 0, 1, 2; equal tags in arrival order.
    assert drain(queue) == ["a1", "b1", "a2", "a3", "b2", "a4", "a5", "b3", "a6"]


def test_a_tenant_arriving_behind_a_flood_waits_for_one_turn_not_the_backlog() -> None:
    queue = WeightedFairQueue()
    for i in range(1, 11):
        queue.push("a", f"a{i}")
    assert [queue.pop() for _ in range(3)] == ["a1", "a2", "a3"]
    queue.push("b", "b1")  # V = 2 (a3's start): b1 starts at 2, a4 at 3
    queue.push("b", "b2")  # at 3, after a4 (which came first)
    assert [queue.pop() for _ in range(4)] == ["b1", "a4", "b2", "a5"]
    assert drain(queue) == [f"a{i}" for i in range(6, 11)]


def test_an_idle_tenant_banks_no_credit() -> None:
    queue = WeightedFairQueue()
    for i in range(1, 5):
        queue.push("a", f"a{i}")
    assert drain(queue) == ["a1", "a2", "a3", "a4"]  # V = 3; b was idle all along
    for i in range(1, 4):
        queue.push("a", f"a{i + 4}")
        queue.push("b", f"b{i}")
    # a from its last finish (4), b from V (3): one turn ahead, then one for one.
    assert drain(queue) == ["b1", "a5", "b2", "a6", "b3", "a7"]


def test_a_withdrawn_turn_gives_its_tenant_its_cost_back() -> None:
    queue = WeightedFairQueue()
    queue.push("a", "a1")
    queue.push("a", "a2")
    queue.push("a", "a3")
    queue.push("b", "b1")
    queue.push("b", "b2")
    assert queue.remove("a", "a1") and not queue.remove("a", "a1") and not queue.remove("c", "x")
    assert (len(queue), queue.queued("a"), queue.queued("b")) == (4, 2, 2)
    # a2 and a3 now start at 0 and 1, as if a1 had never come.
    assert drain(queue) == ["a2", "b1", "a3", "b2"]


def test_wfq_sheds_the_tenant_with_the_most_waiting_turns_per_weight() -> None:
    queue = WeightedFairQueue({"gold": 4.0})
    for i in range(3):
        queue.push("a", f"a{i}")
    for i in range(8):
        queue.push("gold", f"g{i}")
    assert queue.shed("b") == "a"  # a: 3 per weight, gold: 2, b: 1 with its arriving turn
    assert queue.shed("a") == "a"  # the arriving turn of the heaviest is the one refused
    assert queue.newest("a") == "a2" and queue.newest("gold") == "g7"
    assert queue.shed("gold") == "a"  # gold with one more: 9 / 4 < 3


def test_fifo_serves_in_arrival_order_and_refuses_the_arriving_turn() -> None:
    queue = FifoQueue()
    for item in ("a1", "a2", "b1", "a3"):
        queue.push(item[0], item)
    assert queue.shed("b") == "b" and queue.queued("a") == 3 and queue.newest("a") == "a3"
    assert queue.remove("a", "a2") and not queue.remove("a", "a2")
    assert drain(queue) == ["a1", "b1", "a3"]


def test_queues_are_chosen_by_name_and_weights_are_validated() -> None:
    assert make_turn_queue("wfq", {"a": 3.0}).weight("a") == 3.0  # type: ignore[attr-defined]
    assert isinstance(make_turn_queue("fifo"), FifoQueue)
    with pytest.raises(ValueError, match="fairness must be one of wfq, fifo, got 'drr'"):
        make_turn_queue("drr")
    with pytest.raises(ValueError, match="tenant 'a': weight must be positive, got 0"):
        WeightedFairQueue({"a": 0})
