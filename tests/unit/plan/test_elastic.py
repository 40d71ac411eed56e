"""The elastic policy: its sizing rule, engines added and drained in the simulator (a drain fails no
turn and releases the engine once idle), the macro-stepped decode engine against the per-step one,
and a short diurnal day end to end."""

from __future__ import annotations

import math
from dataclasses import replace
from typing import Any

import pytest

from agentserve.bench.common.workloads.generator import GeneratorSpec, generate
from agentserve.plan.elastic import (
    Controller,
    ElasticCluster,
    MacroDecodeEngine,
    ScalingPolicy,
    Signals,
    day_workload,
    pattern_bound,
    rate_at,
    run_elastic,
)
from agentserve.plan.elastic_spec import ELASTIC_DEFAULTS
from agentserve.sim.agents import Agents
from agentserve.sim.cluster import SimCluster
from agentserve.sim.config import SimConfig
from agentserve.sim.events import EventLoop
from agentserve.sim.policies import resolve
from agentserve.sim.run import simulate

pytestmark = pytest.mark.unit

SPEC = ELASTIC_DEFAULTS


def _signals(**overrides: Any) -> Signals:
    base = {
        "prefill_work_rate": 3.0,
        "prefill_backlog_s": 0.0,
        "kv_blocks": 700,
        "returning_blocks": 0.0,
        "in_flight_share": 1.0,
        "pool_blocks": 100,
        "prefill": 5,
        "decode": 10,
    }
    return Signals(**{**base, **overrides})


def test_the_policy_sizes_prefill_on_offered_work_and_queue_depth_and_decode_on_kv_and_tool_waits() -> None:
    policy = ScalingPolicy(replace(SPEC, prefill_target_util=0.6, kv_target=0.7, backlog_target_s=2.0))
    assert policy.need(_signals()) == (5, 10)  # 3.0 / 0.6 prefill; 700 / (100 * 0.7) decode
    assert policy.need(_signals(prefill_backlog_s=5.0)) == (6, 10)  # a deep queue adds one more
    # sessions in tool waits: back in flight 60% of the time, they and the turns in flight hold
    # 0.6 * (700 + 400) = 660 blocks on average: under the pressure now, which decides
    assert policy.need(_signals(returning_blocks=240.0, in_flight_share=0.6)) == (5, 10)
    # a ramp: 1000 blocks of waiting sessions back 60% of the time, 1020 blocks, 15 engines
    assert policy.need(_signals(returning_blocks=600.0, in_flight_share=0.6)) == (5, 15)
    assert policy.need(_signals(prefill_work_rate=0.0, kv_blocks=0)) == (1, 1)  # never below one
    assert policy.need(_signals(kv_blocks=10**6))[1] == SPEC.max_engines
    # the load a start-up ahead: 25% more arrivals by then scale both roles out now
    assert policy.need(_signals(growth=1.25)) == (7, 13)  # 3.75 / 0.6; 875 / 70


def test_a_turn_waiting_for_room_in_a_decode_pool_adds_a_decode_engine_when_that_signal_is_on() -> None:
    assert ScalingPolicy(replace(SPEC, kv_target=0.7)).need(_signals(decode_pool_waiting=2)) == (5, 10)
    assert ScalingPolicy(replace(SPEC, kv_target=0.7, decode_queue=True)).need(_signals(decode_pool_waiting=2)) == (
        5,
        11,
    )


def test_the_forecast_is_the_diurnal_rate_growth_over_an_engines_lead_and_never_below_one() -> None:
    spec = replace(SPEC, forecast=True, startup_s=120.0, interval_s=30.0)
    controller = Controller(spec, total_turns=1)
    loop = EventLoop()
    controller.loop = loop
    loop.at(8 * 3600.0, lambda: None)  # the morning ramp
    loop.run()
    assert controller.growth() == pytest.approx(rate_at(spec, 8 * 3600.0 + 150.0) / rate_at(spec, 8 * 3600.0))
    assert controller.growth() > 1.0
    loop.at(18 * 3600.0, lambda: None)  # the evening: the rate falls, scale-in waits for the load itself
    loop.run()
    assert controller.growth() == 1.0
    assert Controller(replace(spec, forecast=False), 1).growth() == 1.0


def test_the_diurnal_rate_peaks_at_its_hour_and_bounds_the_saving() -> None:
    assert rate_at(SPEC, SPEC.peak_at_s) == pytest.approx(SPEC.peak_sessions_per_s)
    assert rate_at(SPEC, SPEC.peak_at_s + SPEC.day_s / 2) == pytest.approx(SPEC.trough * SPEC.peak_sessions_per_s)
    # mean of ((1 + cos)/2)^3 over a period is 5/16
    assert pattern_bound(SPEC) == pytest.approx(1 - (SPEC.trough + (1 - SPEC.trough) * 5 / 16), abs=1e-4)


def _workload(sessions: int = 12, turns: int = 4) -> Any:
    return generate(
        GeneratorSpec(
            teams=sessions,
            agents=1,
            turns=turns,
            pattern="independent",
            system_tokens=1024,
            first_tokens=2048,
            new_tokens=512,
            output_tokens=64,
            tool_prob=1.0,
            tool_time="const:2",
            arrival_rate=1.0,
        )
    )


CONFIG = SimConfig(model="dense-27b", gpus_per_node=1, snic_gbps=50.0, prefill_engines=2, decode_engines=3)


def test_a_drained_engine_takes_no_new_turn_finishes_its_own_and_is_released() -> None:
    workload = _workload()
    holder: list[ElasticCluster] = []
    drained_at: list[float] = []

    def factory(*args: Any) -> ElasticCluster:
        holder.append(ElasticCluster(*args))
        return holder[0]

    def on_start(loop: EventLoop, cluster: SimCluster, agents: Agents) -> None:
        def drain() -> None:
            drained_at.append(loop.now())
            assert isinstance(cluster, ElasticCluster)
            cluster.drain("decode-0-0")
            cluster.drain("prefill-0-0")
            cluster.ask("decode", 5.0)

        loop.at(3.0, drain)

    result = simulate(
        CONFIG,
        resolve("dualpath"),
        workload,
        [s.arrival_s for s in workload.sessions],
        None,
        0,
        cluster_factory=factory,
        on_start=on_start,
    )
    cluster = holder[0]
    assert len(result.records) == workload.num_turns and all(r.ok for r in result.records)  # no turn failed
    after = [r for r in result.records if r.sent_s > drained_at[0]]
    assert after and all(r.decode_engine != "decode-0-0" and r.prefill_engine != "prefill-0-0" for r in after)
    assert "decode-0-0" not in cluster.decodes and "prefill-0-0" not in cluster.prefills
    assert cluster.events == {"added": 1, "drained": 2, "released": 2}
    released = cluster.held["decode-0-0"][1]
    assert drained_at[0] <= released < math.inf
    assert any(r.decode_engine == "decode-3-0" for r in result.records)  # the added engine took turns
    # the added engine's GPU counts from the asking, 5 s before it took a turn
    assert cluster.held["decode-3-0"][0] == pytest.approx(drained_at[0])
    assert cluster.gpu_seconds(100.0) < 5 * 100.0


def test_macro_decode_steps_give_the_per_step_engines_latencies() -> None:
    workload = _workload(sessions=16, turns=3)
    arrivals = [s.arrival_s for s in workload.sessions]

    class Macro(SimCluster):
        decode_engine_type = MacroDecodeEngine

    plain = simulate(CONFIG, resolve("dualpath"), workload, arrivals, None, 0)
    macro = simulate(CONFIG, resolve("dualpath"), workload, arrivals, None, 0, cluster_factory=Macro)
    key = lambda r: (r.session_id, r.index)  # noqa: E731
    for a, b in zip(sorted(plain.records, key=key), sorted(macro.records, key=key)):
        assert b.done_s == pytest.approx(a.done_s, rel=0.02)
        assert b.tpot_s == pytest.approx(a.tpot_s, rel=0.02)
    assert macro.events < plain.events / 2  # 64-token outputs; a day of 600-token ones saves far more


def test_a_short_day_saves_gpu_hours_against_the_peak_sized_deployment_and_fails_no_turn() -> None:
    spec = replace(
        SPEC, day_s=3 * 3600.0, peak_at_s=1.5 * 3600.0, peak_sessions_per_s=0.02, max_engines=16, scale_in_after_s=300.0
    )
    result = run_elastic(spec)
    assert result["static"]["turns_failed"] == result["elastic"]["turns_failed"] == 0
    assert result["elastic"]["turns"] == result["static"]["turns"] == day_workload(spec, 0).workload.num_turns
    assert result["elastic"]["engines_added"] > 0 and result["elastic"]["engines_drained"] > 0
    assert 0 < result["gpu_hours_saved"] < result["pattern_bound"]
    assert set(result) >= {"gpu_hours_saved", "slo_attainment_static", "slo_attainment_elastic"}
