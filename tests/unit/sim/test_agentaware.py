"""`sim agentaware`: its policies are the services' objects, its engine's virtual timings are the
cost model's, a store-backed engine loads what a store-less one recomputes, a parked session's
upload lands before its return, and a run is a function of its inputs."""

from __future__ import annotations

import pytest

from agentserve.bench.common.workloads.model import Session, ToolCall, Turn, Workload
from agentserve.bench.papers.agentaware.stacks import STACKS
from agentserve.kv.eviction import HintedPolicy, LRUPolicy
from agentserve.scheduler.kv_lifecycle import LIFECYCLE_POLICIES, make_lifecycle_policy
from agentserve.sim.agentaware.bench import keys_against, must_show
from agentserve.sim.agentaware.config import AwareConfig
from agentserve.sim.agentaware.engine import AwareEngine
from agentserve.sim.agentaware.policies import POLICY_NAMES, make_aware_policy
from agentserve.sim.agentaware.run import AwareRun, simulate_aware
from agentserve.sim.agentaware.turn import AwareTurn, context_block_ids
from agentserve.sim.events import EventLoop
from agentserve.sim.nic import SharedLink

BS = 16


def test_every_policy_name_resolves_to_the_services_lifecycle_and_eviction_classes() -> None:
    assert set(POLICY_NAMES) == {"vllm", *LIFECYCLE_POLICIES}
    for name in LIFECYCLE_POLICIES:
        policy = make_aware_policy(name)
        assert policy.store and policy.lifecycle == name
        assert type(policy.lifecycle_policy(0.01)) is type(make_lifecycle_policy(name, 0.01, 0.5, policy.offload))
        assert policy.eviction == STACKS.get(name, {}).get("decode", {}).get("eviction_policy", "lru")
    vllm = make_aware_policy("vllm")
    assert (vllm.store, vllm.lifecycle, vllm.eviction) == (False, "lru", "lru")
    with pytest.raises(ValueError, match="must be one of vllm, lru"):
        make_aware_policy("fifo")


def _engine(policy: str, pool_blocks: int = 64) -> tuple[EventLoop, AwareEngine, list[AwareTurn]]:
    loop = EventLoop()
    config = AwareConfig(engines=1, block_size=BS, pool_blocks_per_engine=pool_blocks)
    done: list[AwareTurn] = []
    link = SharedLink(loop, "node-0", config.snic_bytes_per_s)
    engine = AwareEngine(
        "engine-0",
        loop,
        config.cost(),
        pool_blocks,
        BS,
        make_aware_policy(policy),
        link,
        config.block_bytes,
        chunk_tokens=4096,
        on_done=done.append,
    )
    return loop, engine, done


def _turn(prior: int, new: int, output: int, index: int = 0) -> AwareTurn:
    return AwareTurn(
        "s",
        index,
        False,
        prior,
        prior + new,
        output,
        0.0,
        context_block_ids("s", 0, prior + new + output, BS),
        returning=index > 0,
    )


def test_the_pools_are_the_block_managers_of_the_policys_eviction_on_virtual_time() -> None:
    _, lru, _ = _engine("lru")
    _, aware, _ = _engine("agentserve")
    assert isinstance(lru.blocks._evictable, LRUPolicy)
    assert isinstance(aware.blocks._evictable, HintedPolicy)
    assert aware.blocks._evictable._clock == aware.loop.now


def test_a_turn_takes_its_prefill_then_one_decode_step_per_token_in_virtual_time() -> None:
    loop, engine, done = _engine("lru")
    turn = _turn(0, 100, 3)
    engine.submit(turn)
    loop.run()
    cost = engine.cost
    prefill = cost.prefill_s(0, 100)
    step1 = cost.decode_step_s([101])
    step2 = cost.decode_step_s([102])
    assert done == [turn]
    assert turn.first_token_s == pytest.approx(prefill, rel=0, abs=1e-12)
    assert turn.done_s == pytest.approx(prefill + step1 + step2, rel=0, abs=1e-12)
    assert (turn.hit_blocks, turn.loaded_blocks, turn.computed_tokens) == (0, 0, 100)


def _second_turn_after_eviction(policy: str) -> AwareTurn:
    loop, engine, _ = _engine(policy, pool_blocks=12)
    engine.submit(_turn(0, 100, 12))  # 112 tokens: 7 full blocks cached at its end
    loop.run()
    other = AwareTurn("t", 0, False, 0, 150, 10, loop.now(), context_block_ids("t", 0, 160, BS))
    engine.submit(other)  # needs 10 of the 12 slots: evicts 5 of the session's 7 blocks, deepest first
    loop.run()
    second = _turn(112, 40, 2, index=1)
    engine.submit(second)
    loop.run()
    return second


def test_a_store_backed_engine_loads_the_evicted_context_that_vllm_computes_again() -> None:
    lru = _second_turn_after_eviction("lru")
    vllm = _second_turn_after_eviction("vllm")
    for turn in (lru, vllm):
        assert turn.hit_blocks == 2 and turn.kv_left  # the root blocks survived, the rest left
    assert (lru.loaded_blocks, lru.computed_tokens) == (5, 152 - 7 * BS)
    assert (vllm.loaded_blocks, vllm.computed_tokens) == (0, 152 - 2 * BS)


def _tool_session(wait_s: float, predicted_s: float) -> Workload:
    tool = ToolCall("search", wait_s, predicted_s=predicted_s)
    turns = (Turn(4, new_tokens=200, tools=(tool,)), Turn(4, new_tokens=20))
    # Another agent's turns that run while the lead waits (after a call too short to park: under `kv_min_wait_s`).
    filler = (Turn(4, new_tokens=80, tools=(ToolCall("bash", 0.3, predicted_s=0.3),)),) + tuple(
        Turn(4, new_tokens=80) for _ in range(2)
    )
    sessions = (
        Session("j000-lead", turns, critical=True),
        Session("j000-filler", filler),
    )
    return Workload("tool", sessions).validate()


def test_a_parked_session_is_uploaded_before_its_return_and_finds_its_kv_resident() -> None:
    config = AwareConfig(engines=1, block_size=BS, pool_blocks_per_engine=24)
    workload = _tool_session(wait_s=30.0, predicted_s=30.0)
    offload = simulate_aware(config, make_aware_policy("tokencake"), workload, rate=1.0, seed=0)
    lru = simulate_aware(config, make_aware_policy("lru"), workload, rate=1.0, seed=0)
    # The filler's three turns evict the waiting lead's blocks under lru; tokencake drops them at
    # the call's start and uploads them back ahead of the predicted return.
    assert offload["parking"]["offloads"] == 1 and offload["parking"]["uploads"] == 1
    assert (offload["returning_turns_kv_left"], offload["prefetch_hit_ratio"]) == (1, 1.0)
    assert (lru["returning_turns_kv_left"], lru["prefetch_hit_ratio"]) == (1, 0.0)
    # tokencake moved the whole context (12 blocks) ahead of the return; lru loads the 4 evicted
    # blocks on demand when the lead is back.
    assert (offload["store_loaded_blocks"], lru["store_loaded_blocks"]) == (12, 4)


def test_a_run_is_a_function_of_its_inputs() -> None:
    config = AwareConfig(engines=2, engines_per_node=2, block_size=BS, pool_blocks_per_engine=40)
    workload = _tool_session(wait_s=5.0, predicted_s=4.0)
    first = simulate_aware(config, make_aware_policy("agentserve"), workload, rate=0.5, seed=3)
    second = simulate_aware(config, make_aware_policy("agentserve"), workload, rate=0.5, seed=3)
    first.pop("wall_s"), second.pop("wall_s")
    assert first == second


def test_the_keys_compare_agentserve_with_each_baseline_at_the_compare_rate() -> None:
    def run(latency: float, util: float, hits: float | None, bound: float) -> dict:
        return {
            "job_latency_mean_s": latency,
            "kv": {"kv_utilization": util},
            "prefetch_hit_ratio": hits,
            "bound": {"job_latency_bound_mean_s": bound},
        }

    runs = {
        "agentserve": {2.0: run(50.0, 0.6, 0.9, 40.0)},
        "vllm": {2.0: run(100.0, 0.5, 0.0, 40.0)},
        "lru": {2.0: run(80.0, 0.4, 0.0, 40.0)},
    }
    shown = must_show(runs, 2.0)
    assert keys_against(runs["agentserve"][2.0], runs["vllm"][2.0]) == {
        "e2e_latency_reduction": 0.5,
        "kv_utilization_gain": 0.2,
        "prefetch_hit_ratio": 0.9,
    }
    assert shown["e2e_latency_reduction"] == 0.5 and shown["targets"]["e2e_latency_reduction"]["met"] is True
    assert shown["vs_lru"]["e2e_latency_reduction"] == 0.375
    assert shown["vs_lru"]["e2e_latency_reduction_bound"] == 0.5
    assert shown["vs_lru"]["kv_utilization_gain_bound"] == 1.5
    assert (
        shown["targets"]["kv_utilization_gain"]["met"] is True and shown["targets_vs_lru"]["prefetch_hit_ratio"]["met"]
    )


def test_sessions_given_arrival_times_arrive_then_each_as_its_own_job_and_a_turn_waits_its_think_time() -> None:
    turns = (Turn(output_tokens=4, new_tokens=64, tools=(ToolCall("bash", 3.0),)), Turn(4, 32, think_s=2.0))
    sessions = tuple(Session(f"day-{i}", turns) for i in range(2))  # one `job_of` name: one job without times
    config = AwareConfig(engines=2, block_size=BS, pool_blocks_per_engine=64)
    run = AwareRun(config, make_aware_policy("agentserve"), Workload("w", sessions), 1.0, 0, arrivals=[1.0, 7.5])
    run.serve()
    sent = {key: record.sent_s for key, record in run.records.items()}
    assert sent[("day-0", 0)] == 1.0 and sent[("day-1", 0)] == 7.5
    for sid in ("day-0", "day-1"):
        # the second turn: the first one's last token, its 3 s tool call, then 2 s of think time
        last = run.records[(sid, 0)].last_token_s
        assert last is not None and sent[(sid, 1)] == pytest.approx(last + 5.0, abs=1e-9)
    with pytest.raises(ValueError, match="arrivals: 1 times for 2 sessions"):
        AwareRun(config, make_aware_policy("lru"), Workload("w", sessions), 1.0, 0, arrivals=[0.0])
