"""Priority inside an engine: the waiting queue's order, which sequence a full pool preempts, and the
pool share held for critical sequences (sized by their demand, taken by no one else)."""

from __future__ import annotations

import pytest

from agentserve.contracts import SamplingParams
from agentserve.contracts.agents import CRITICAL_PRIORITY
from agentserve.engine.engine import LLMEngine
from agentserve.engine.engine_config import EngineConfig

pytestmark = pytest.mark.unit

BS = 16


@pytest.fixture(scope="module")
def base(tiny_model_dir):
    return LLMEngine.from_dir(tiny_model_dir)


def engine(base, slots: int, **config) -> LLMEngine:
    kv_bytes = slots * base.pool.bytes_per_slot
    return LLMEngine(base.model, base.fingerprint, EngineConfig(kv_cache_bytes=kv_bytes, prefix_cache=False, **config))


def prompt(n: int, start: int = 10) -> list[int]:
    return [start + i for i in range(n)]


def test_the_queue_is_ordered_by_priority_then_arrival(base):
    e = engine(base, 64)
    params = SamplingParams(max_tokens=2)
    seqs = [e.add_request(prompt(4, 10 * i), params, priority=p) for i, p in enumerate((0, 5, -3, 5, 0))]
    assert [e.waiting.index(s) for s in seqs] == [2, 0, 4, 1, 3]


def test_among_equal_priorities_the_lower_rank_goes_first_then_arrival(base):
    e = engine(base, 64)
    params = SamplingParams(max_tokens=2)
    # (priority, rank): rank orders only within a priority; equal keys keep their arrival order
    keys = [(0, 3), (0, 1), (5, 9), (0, 1), (0, 0), (-1, 0)]
    seqs = [e.add_request(prompt(4, 10 * i), params, priority=p, rank=r) for i, (p, r) in enumerate(keys)]
    assert [e.waiting.index(s) for s in seqs] == [4, 2, 0, 3, 1, 5]
    # a sequence sent back to the front goes before its own (priority, rank) class only
    front = seqs[3]
    e.waiting.remove(front)
    e._enqueue(front, front=True)
    assert list(e.waiting) == [seqs[2], seqs[4], seqs[3], seqs[1], seqs[0], seqs[5]]


def test_a_full_pool_preempts_the_lowest_priority_first_and_outputs_stay_exact(base):
    params = SamplingParams(max_tokens=40, ignore_eos=True)
    prompts = [prompt(30, 100 * i) for i in range(3)]
    expected = [base.generate(p, params).output_token_ids for p in prompts]
    e = engine(base, 10, max_batch_size=3)  # 3 x 70 tokens need 15 blocks: someone must yield
    seqs = [e.add_request(p, params, priority=pr) for p, pr in zip(prompts, (1, -1, 2))]
    preempted = []
    while e.has_unfinished():
        before = {s.request_id for s in e.running}
        e.step()
        preempted += [s for s in seqs if s.request_id in before and s in e.waiting]
    assert preempted and {s.priority for s in preempted} == {-1}
    assert [s.output_token_ids for s in seqs] == expected


def test_the_critical_share_holds_room_for_critical_demand_only(base):
    e = engine(base, 20, critical_reserve=0.5)
    critical = e.add_request(prompt(40), SamplingParams(max_tokens=24, ignore_eos=True), priority=CRITICAL_PRIORITY)
    # Waiting: all of its 4 blocks (64 tokens) are demand; the share (10) is more than it needs.
    assert e.critical_reserve() == 4
    e.step()  # admitted (3 blocks now), decoding: it still grows by one block
    assert (len(critical.slots), e.critical_reserve()) == (3, 1)
    # 17 slots are free: a non-critical sequence needing all 17 must leave the critical one its block.
    ordinary = e.add_request(prompt(265, 500), SamplingParams(max_tokens=6, ignore_eos=True))
    e.step()
    assert ordinary in e.waiting and e.blocks.num_free_slots == 17
    e.abort(critical)
    assert e.critical_reserve() == 0
    e.step()
    assert ordinary in e.running  # the demand is gone, and so is the share


def test_a_critical_share_out_of_range_is_refused():
    with pytest.raises(ValueError, match=r"^critical_reserve must be a fraction of the pool in \[0, 1\), got 1.0$"):
        EngineConfig(critical_reserve=1.0)


def test_a_hinted_pool_keeps_a_higher_priority_sessions_history_longer(base):
    config = EngineConfig(kv_cache_bytes=24 * base.pool.bytes_per_slot, eviction_policy="hinted")
    e = LLMEngine(base.model, base.fingerprint, config)
    params = SamplingParams(max_tokens=1, ignore_eos=True)
    first = e.add_request(prompt(48, 100), params, priority=40)  # 3 full blocks, cached at priority 40
    while e.has_unfinished():
        e.step()
    later = e.add_request(prompt(48, 300), params)  # used more recently, at priority 0
    while e.has_unfinished():
        e.step()
    slots = [[e.blocks.lookup(b) for b in seq.block_ids[:3]] for seq in (first, later)]
    # LRU would evict the first one's blocks first; by priority the later one's go first.
    assert e.blocks.eviction_order() == [*reversed(slots[1]), *reversed(slots[0])]
