"""Prefill and decode engines against the cost model, with exact virtual timings."""

import pytest

from agentserve.costmodel.gpus import H800
from agentserve.costmodel.models import DEEPSEEK_V32
from agentserve.costmodel.timing import ComputeCost
from agentserve.engine.prefill_batch import ComputeQuotaBatch, FcfsBatch, PrefillBatchPolicy
from agentserve.sim.decode import DecodeEngine
from agentserve.sim.events import EventLoop
from agentserve.sim.nic import SharedLink
from agentserve.sim.prefill import PrefillEngine, PrefillSettings
from agentserve.sim.turn import SimTurn

GB = 1e9
COST = ComputeCost(DEEPSEEK_V32, H800, prefill_mfu=0.4)


def _turn(seq: int, prompt: int, cached: int, output: int = 4) -> SimTurn:
    return SimTurn(
        agent=None,  # type: ignore[arg-type]  # the engines never read the agent
        index=0,
        prompt_tokens=prompt,
        cached_tokens=cached,
        output_tokens=output,
        seq=seq,
        submitted_s=0.0,
    )


def _prefill(
    loop: EventLoop,
    layerwise: bool,
    batching: PrefillBatchPolicy,
    done: list[SimTurn],
    groups: int = 4,
    load_order: str = "concurrent",
) -> PrefillEngine:
    settings = PrefillSettings(
        layerwise=layerwise,
        load_order=load_order,
        layer_groups=groups,
        pool_blocks=10_000,
        block_size=256,
        kv_bytes_per_token=1,
    )
    cnic = SharedLink(loop, "cnic", 1e15)
    return PrefillEngine("p0", loop, COST, batching, settings, cnic, done.append, lambda t: None)


def test_a_prefill_of_n_new_tokens_takes_its_flops_at_the_stated_mfu() -> None:
    loop, done = EventLoop(), list[SimTurn]()
    engine = _prefill(loop, False, FcfsBatch(), done)
    turn = _turn(0, prompt=4096, cached=0)
    engine.submit(turn, [])
    loop.run()
    flops = DEEPSEEK_V32.prefill_flops(0, 4096)
    assert turn.first_token_s == pytest.approx(flops / (989e12 * 0.4), rel=1e-12)
    assert done == [turn]


def test_without_layerwise_the_whole_load_comes_before_the_compute() -> None:
    loop, done = EventLoop(), list[SimTurn]()
    snic = SharedLink(loop, "snic", 10 * GB)
    engine = _prefill(loop, False, FcfsBatch(), done)
    turn = _turn(0, prompt=32_700, cached=32_271)
    engine.submit(turn, [(snic, "p0", 2 * GB)])
    loop.run()
    assert turn.first_token_s == pytest.approx(0.2 + COST.prefill_s(32_271, 429), rel=1e-12)


def test_layerwise_overlaps_each_groups_load_with_the_previous_groups_compute() -> None:
    compute = COST.prefill_s(32_271, 429)
    for load_s in (compute * 3, compute / 3):  # load-bound, then compute-bound
        loop, done = EventLoop(), list[SimTurn]()
        snic = SharedLink(loop, "snic", 10 * GB)
        engine = _prefill(loop, True, FcfsBatch(), done, groups=4)
        turn = _turn(0, prompt=32_700, cached=32_271)
        engine.submit(turn, [(snic, "p0", load_s * 10 * GB)])
        loop.run()
        # Group g's chunk arrives at (g+1) * load/4; its compute (compute/4) starts when both it and
        # group g-1's compute are done.
        expected = max(load_s + compute / 4, load_s / 4 + compute)
        assert turn.first_token_s == pytest.approx(expected, rel=1e-12)


def test_two_ways_in_split_a_load_and_both_must_arrive() -> None:
    loop, done = EventLoop(), list[SimTurn]()
    a, b = SharedLink(loop, "a", 10 * GB), SharedLink(loop, "b", 10 * GB)
    engine = _prefill(loop, False, FcfsBatch(), done)
    turn = _turn(0, prompt=32_700, cached=32_271)
    engine.submit(turn, [(a, "p0", 1 * GB), (b, "d0", 3 * GB)])
    loop.run()
    assert turn.first_token_s == pytest.approx(0.3 + COST.prefill_s(32_271, 429), rel=1e-12)


def test_compute_quota_batches_the_turns_that_waited_and_fcfs_takes_one_at_a_time() -> None:
    one = COST.prefill_s(0, 1000)
    # The first turn starts alone; the two that arrive while it computes wait for the GPU.
    for policy, second_ends in ((FcfsBatch(), 2 * one), (ComputeQuotaBatch(token_budget=8192), 3 * one)):
        loop, done = EventLoop(), list[SimTurn]()
        engine = _prefill(loop, False, policy, done)
        turns = [_turn(i, prompt=1000, cached=0) for i in range(3)]
        for turn in turns:
            engine.submit(turn, [])
        loop.run()
        assert turns[0].first_token_s == pytest.approx(one, rel=1e-12)
        assert turns[1].first_token_s == pytest.approx(second_ends, rel=1e-12)
        assert turns[2].first_token_s == pytest.approx(3 * one, rel=1e-12)


def test_decode_steps_take_weights_plus_kv_reads_and_give_one_token_each() -> None:
    loop, done = EventLoop(), list[SimTurn]()
    engine = DecodeEngine("d0", loop, COST, pool_blocks=1000, block_size=256, on_done=done.append)
    turn = _turn(0, prompt=32_700, cached=0, output=3)
    turn.first_token_s, turn.emitted = 0.0, 1  # the prefill's token
    engine.expect()
    engine.admit(turn)
    loop.run()
    steps = COST.decode_step_s([32_701]) + COST.decode_step_s([32_702])
    assert turn.last_token_s == pytest.approx(steps, rel=1e-12)
    assert turn.done_s == turn.last_token_s
    assert done == [turn] and engine.steps == 2 and engine.pool_taken == 0


def test_a_decode_turn_that_does_not_fit_the_pool_waits_for_room() -> None:
    loop, done = EventLoop(), list[SimTurn]()
    engine = DecodeEngine("d0", loop, COST, pool_blocks=200, block_size=256, on_done=done.append)
    first, second = _turn(0, prompt=32_700, cached=0, output=2), _turn(1, prompt=32_700, cached=0, output=2)
    for turn in (first, second):
        turn.first_token_s, turn.emitted = 0.0, 1
        engine.expect()
        engine.admit(turn)
    loop.run()
    one = COST.decode_step_s([32_701])
    assert first.done_s == pytest.approx(one, rel=1e-12)
    assert second.done_s == pytest.approx(2 * one, rel=1e-12)


def test_fifo_loads_take_the_way_in_one_at_a_time_and_concurrent_ones_share_it() -> None:
    compute = COST.prefill_s(32_271, 429)
    for order, first_loaded in (("fifo", 0.1), ("concurrent", 0.2)):
        loop, done = EventLoop(), list[SimTurn]()
        snic = SharedLink(loop, "snic", 10 * GB)
        engine = _prefill(loop, False, FcfsBatch(), done, load_order=order)
        turns = [_turn(i, prompt=32_700, cached=32_271) for i in range(2)]
        for turn in turns:
            engine.submit(turn, [(snic, "p0", 1 * GB)])
        loop.run()
        # Both loads end by 0.2 s either way; fifo lets the first compute from 0.1 s.
        assert turns[0].first_token_s == pytest.approx(first_loaded + compute, rel=1e-12)
        assert turns[1].first_token_s == pytest.approx(max(0.2, first_loaded + compute) + compute, rel=1e-12)


def test_layerwise_runs_a_turn_whose_kv_has_all_arrived_before_an_older_one_still_arriving() -> None:
    # As `LLMEngine._admit_prefills`: a forward over a prefix still arriving holds the GPU, so
    # while a waiting prefill can run without waiting, those still arriving are passed over.
    compute = COST.prefill_s(32_271, 429)
    loop, done = EventLoop(), list[SimTurn]()
    slow, fast = SharedLink(loop, "slow", 2 * GB), SharedLink(loop, "fast", 100 * GB)
    engine = _prefill(loop, True, FcfsBatch(), done, groups=4)
    first = _turn(0, prompt=32_700, cached=32_271)
    older, newer = _turn(1, prompt=32_700, cached=32_271), _turn(2, prompt=32_700, cached=32_271)
    engine.submit(first, [])  # computes from 0 while the others load
    engine.submit(older, [(slow, "p0", 1 * GB)])  # group g at (g + 1) * 0.125 s
    engine.submit(newer, [(fast, "p0", 1 * GB)])  # all of it by 0.01 s
    loop.run()
    assert newer.first_token_s == pytest.approx(2 * compute, rel=1e-12)
    # From 2 x compute (0.306 s) older's groups 0-2 are in; its last arrives at 0.5 s.
    assert older.first_token_s == pytest.approx(0.5 + compute / 4, rel=1e-12)
